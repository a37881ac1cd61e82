import {
  defaultVcsApiUrl,
  InvalidSettingError,
  messageOf,
  SettingsSource,
  vcsProviderSchema,
  vcsUrlSchema,
  type FlagValues,
} from "@drover/protocol";
import type { VcsEndpoint } from "@drover/vcs";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { loadAgentConfig, type AgentConfig } from "../config.js";

/*
 * A VCS agent's configuration: the session settings every agent has, and the connections it
 * reaches, by the names the server knows them by. The credentials live here, on the agent inside
 * the private network, so the server may hold none.
 */

/** One connection as this agent reaches it (by token: the file holds tokens only). */
export interface AgentVcsConnection extends VcsEndpoint {
  auth: { kind: "token"; token: string };
  /** What the VCS signs (GitHub) or sends (GitLab) webhook deliveries with; absent: none accepted. */
  webhookSecret?: string | undefined;
}

export interface VcsAgentConfig {
  agent: AgentConfig;
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
const connectionSchema = z.strictObject({
  provider: vcsProviderSchema,
  url: vcsUrlSchema,
  apiUrl: vcsUrlSchema.optional(),
  token: secret,
  webhookSecret: secret.optional(),
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
      `${source} is not a map of connection name to {provider, url, apiUrl, token, webhookSecret}: ${where}`,
    );
  }
  const out = new Map<string, AgentVcsConnection>();
  for (const [name, c] of Object.entries(parsed.data))
    out.set(name, {
      provider: c.provider,
      url: c.url,
      apiUrl: c.apiUrl ?? defaultVcsApiUrl(c.provider, c.url),
      auth: { kind: "token", token: c.token },
      ...(c.webhookSecret === undefined ? {} : { webhookSecret: c.webhookSecret }),
    });
  return out;
}

/** Reads the VCS agent's settings and flags; any bad value throws one clear line. */
export function loadVcsAgentConfig(env: NodeJS.ProcessEnv, flags: FlagValues = {}): VcsAgentConfig {
  const agent = loadAgentConfig(env, flags);
  const src = new SettingsSource(env, flags);
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
