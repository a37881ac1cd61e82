import {
  defaultVcsApiUrl,
  githubAppSchema,
  InvalidSettingError,
  messageOf,
  settings,
  SettingsSource,
  vcsProviderSchema,
  vcsUrlSchema,
  type FlagValues,
  type SettingName,
  type SettingReader,
} from "@drover/protocol";
import type { VcsAuth, VcsEndpoint } from "@drover/vcs";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { z } from "zod";
import { loadSessionConfig, type SessionConfig } from "../config.js";

/*
 * A VCS agent's configuration: the session settings every agent has, and the connections it
 * reaches, by the names the server knows them by. The credentials live here, on the agent inside
 * the private network, so the server may hold none. A run agent's setting it has no use for
 * (driver, caches, hooks, stop action…) is refused rather than ignored.
 */

/** One connection as this agent reaches it: by token, or as a GitHub App whose key file it read. */
export interface AgentVcsConnection extends VcsEndpoint {
  auth: VcsAuth;
  /** What the VCS signs (GitHub) or sends (GitLab) webhook deliveries with; absent: none accepted. */
  webhookSecret?: string | undefined;
}

export interface VcsAgentConfig {
  agent: SessionConfig;
  connections: ReadonlyMap<string, AgentVcsConnection>;
  /** Where the connections came from, named in errors. */
  connectionsFile: string;
  concurrency: number;
  /** 0: no webhook listener. */
  webhookPort: number;
  webhookAddress: string | undefined;
}

const secret = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^[\x21-\x7e]+$/, "one line of visible ASCII characters");
const connectionSchema = z
  .strictObject({
    provider: vcsProviderSchema,
    url: vcsUrlSchema,
    apiUrl: vcsUrlSchema.optional(),
    token: secret.optional(),
    /** A GitHub App: installation tokens are minted here, from the key in `privateKeyFile`. */
    githubApp: z
      .strictObject({
        appId: githubAppSchema.shape.appId,
        installationId: githubAppSchema.shape.installationId,
        /** The app's PEM key; a relative path is from the connections file's folder. */
        privateKeyFile: z.string().min(1).max(4096),
      })
      .optional(),
    webhookSecret: secret.optional(),
  })
  .superRefine((c, ctx) => {
    if ((c.token === undefined) === (c.githubApp === undefined))
      ctx.addIssue({ code: "custom", message: "give a token or a githubApp, one of them" });
    if (c.githubApp !== undefined && c.provider !== "github")
      ctx.addIssue({ code: "custom", path: ["githubApp"], message: "a GitHub App authenticates to GitHub only" });
  });
const fileSchema = z.record(
  z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, "not a connection name"),
  connectionSchema,
);

/** Parses the connections file; every problem is one line naming the file, never a token. */
export function parseVcsConnections(text: string, source: string): Map<string, AgentVcsConnection> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new InvalidSettingError("DROVER_AGENT_VCS_CONNECTIONS_FILE", `${source} is not JSON: ${messageOf(err)}`);
  }
  const parsed = fileSchema.safeParse(json);
  if (!parsed.success) {
    // Paths and messages only: zod's messages never quote a value, so a token is not printed.
    const where = parsed.error.issues.map((i) => `${i.path.join(".") || "(top)"}: ${i.message}`).join("; ");
    throw new InvalidSettingError(
      "DROVER_AGENT_VCS_CONNECTIONS_FILE",
      `${source} is not a map of connection name to {provider, url, apiUrl, token or githubApp, webhookSecret}: ${where}`,
    );
  }
  const out = new Map<string, AgentVcsConnection>();
  for (const [name, c] of Object.entries(parsed.data))
    out.set(name, {
      provider: c.provider,
      url: c.url,
      apiUrl: c.apiUrl ?? defaultVcsApiUrl(c.provider, c.url),
      auth: c.githubApp ? appAuth(name, c.githubApp, source) : { kind: "token", token: c.token ?? "" },
      ...(c.webhookSecret === undefined ? {} : { webhookSecret: c.webhookSecret }),
    });
  return out;
}

/** A GitHub App's auth with its key read from its file; errors name the file, never the key. */
function appAuth(
  name: string,
  app: { appId: string; installationId: number; privateKeyFile: string },
  source: string,
): VcsAuth {
  const path = resolve(dirname(source), app.privateKeyFile);
  let privateKey: string;
  try {
    privateKey = readFileSync(path, "utf8");
  } catch (err) {
    throw new InvalidSettingError(
      "DROVER_AGENT_VCS_CONNECTIONS_FILE",
      `${source}: ${name}.githubApp.privateKeyFile ${path} cannot be read: ${messageOf(err)}`,
    );
  }
  if (!githubAppSchema.shape.privateKey.safeParse(privateKey).success)
    throw new InvalidSettingError(
      "DROVER_AGENT_VCS_CONNECTIONS_FILE",
      `${source}: ${name}.githubApp.privateKeyFile ${path} is not a PEM private key (the app's key as GitHub gave it)`,
    );
  return { kind: "github-app", appId: app.appId, installationId: app.installationId, privateKey };
}

/** What the VCS agent does instead of what a refused run agent setting would, where it does something. */
const vcsInstead: Partial<Record<SettingName, string>> = {
  DROVER_AGENT_CONCURRENCY: "it runs DROVER_AGENT_VCS_CONCURRENCY tasks at once",
  DROVER_AGENT_WORKER_ON_STOP_ACTION:
    "on SIGTERM it lets running tasks finish within DROVER_AGENT_GRACE_PERIOD_SECONDS, then leaves them to another agent",
  DROVER_AGENT_OTLP_TRACES_ENABLED: "it exports metrics only (DROVER_AGENT_OTLP_METRICS_ENABLED)",
};

/**
 * Refuses a setting of the run agent or controller that the VCS agent does not read. Only those:
 * the server's and the CLI's may share its environment (the image sets DROVER_HOST for every
 * command), and variables not Drover's own (TF_CLI_CONFIG_FILE) belong to whoever else reads them.
 */
function refuseRunAgentSettings(src: SettingsSource): void {
  for (const name of Object.keys(settings) as SettingName[]) {
    const readers: readonly SettingReader[] = settings[name].readers;
    const runAgents = readers.includes("agent") || readers.includes("controller");
    if (!name.startsWith("DROVER_") || !runAgents || readers.includes("vcs-agent")) continue;
    const origin = src.origin(name);
    if (origin === undefined) continue;
    const given = origin === "flag" ? `${settings[name].flag} (${name})` : name;
    const instead = vcsInstead[name];
    throw new InvalidSettingError(
      name,
      `${given} is a run agent's setting, which the VCS agent (\`drover agent vcs\`) does not use${instead ? `: ${instead}` : ""}; unset it`,
      { hint: "The README's agent settings table names `vcs-agent` in the last column of each setting it reads." },
    );
  }
}

/** Reads the VCS agent's settings and flags; any bad value, or a setting it would ignore, throws one clear line. */
export function loadVcsAgentConfig(env: NodeJS.ProcessEnv, flags: FlagValues = {}): VcsAgentConfig {
  const src = new SettingsSource(env, flags);
  refuseRunAgentSettings(src);
  const session = loadSessionConfig(src);
  // It makes no spans: a trace export would send nothing.
  const agent = { ...session, otlp: session.otlp && { ...session.otlp, traces: false } };
  const file = src.get("DROVER_AGENT_VCS_CONNECTIONS_FILE");
  if (file === undefined)
    throw new InvalidSettingError(
      "DROVER_AGENT_VCS_CONNECTIONS_FILE",
      "a VCS agent needs DROVER_AGENT_VCS_CONNECTIONS_FILE: the connections it reaches, with their credentials",
    );
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new InvalidSettingError("DROVER_AGENT_VCS_CONNECTIONS_FILE", `${file} cannot be read: ${messageOf(err)}`);
  }
  return {
    agent,
    connections: parseVcsConnections(text, file),
    connectionsFile: file,
    concurrency: src.get("DROVER_AGENT_VCS_CONCURRENCY"),
    webhookPort: src.get("DROVER_AGENT_VCS_WEBHOOK_PORT"),
    webhookAddress: src.get("DROVER_AGENT_VCS_WEBHOOK_ADDRESS"),
  };
}
