import { newId, newUserToken, parsePoolToken, routes } from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import type { Command } from "commander";
import { runsUntilSignalled } from "../stdio.js";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { quickstartCommands } from "../quickstart-commands.js";
import { credentialsPath, readCredentials, writeCredentials } from "../settings.js";

/** Reads a secret kept in the data dir, creating it once. */
function keep(path: string, make: () => string): string {
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  const value = make();
  writeFileSync(path, value + "\n", { mode: 0o600 });
  return value;
}

/**
 * Logs the CLI in to the quickstart's server. A login to another server (`drover login`) is
 * kept: the quickstart's credentials then go to a config dir of its own in its data dir.
 */
function logIn(
  dataDir: string,
  url: string,
  token: string,
): { credentials: string; kept?: string; keptIn?: string; configDir?: string } {
  let earlier: string | undefined;
  try {
    earlier = readCredentials().url;
  } catch {
    // A file that does not parse is someone's too: left as it is.
    earlier = "not readable";
  }
  if (earlier === undefined || earlier === url) return { credentials: writeCredentials({ url, token }) };
  const configDir = join(dataDir, "cli-config");
  const credentials = writeCredentials({ url, token }, { ...process.env, DROVER_CONFIG_DIR: configDir });
  return { credentials, kept: earlier, keptIn: credentialsPath(), configDir };
}

/**
 * `drover quickstart` (what `npm start` runs): a server on SQLite under ./.drover, a pool
 * `default` with one local agent, a workspace `hello`; then it prints how to run the example.
 * Everything is idempotent across restarts.
 */
export function registerQuickstartCommand(program: Command): void {
  program
    .command("quickstart")
    .description("Start a server with a local agent, ready to run examples/hello")
    .option("--data-dir <dir>", "where everything is kept (DROVER_DATA_DIR, default .drover)")
    .option("--port <port>", "server port (DROVER_PORT, default 8800)")
    .action(async (opts: { dataDir?: string; port?: string }) => {
      runsUntilSignalled();
      const { loadServerConfig, startServer } = await import("@drover/server");
      // A flag beats its variable, which beats the quickstart's default (an empty variable counts as unset).
      const dataDir = resolve(opts.dataDir ?? (process.env.DROVER_DATA_DIR || ".drover"));
      const port = opts.port ?? (process.env.DROVER_PORT || "8800");
      mkdirSync(dataDir, { recursive: true });
      const adminToken = keep(join(dataDir, "admin-token"), () => newUserToken(newId("utok")));
      const server = await startServer(
        loadServerConfig({
          env: { ...process.env, DROVER_LOG_LEVEL: process.env.DROVER_LOG_LEVEL ?? "warn" },
          flags: { dataDir, port, adminToken },
        }),
      );
      const api = new DroverClient({ baseUrl: server.url, token: adminToken });
      const login = logIn(dataDir, server.url, adminToken);

      const pools = (await api.call(routes.listPools, {})).items;
      if (!pools.some((p) => p.name === "default")) await api.call(routes.createPool, { body: { name: "default" } });
      const tokenPath = join(dataDir, "pool-token");
      const existing = existsSync(tokenPath) ? readFileSync(tokenPath, "utf8").trim() : "";
      // A token minted for another URL (a different --port) is replaced.
      let poolToken = existing && parsePoolToken(existing).url === server.url ? existing : "";
      if (!poolToken) {
        poolToken = (
          await api.call(routes.createPoolToken, {
            params: { pool: "default" },
            body: { description: "quickstart agent" },
          })
        ).token;
        writeFileSync(tokenPath, poolToken + "\n", { mode: 0o600 });
      }
      const workspaces = (await api.call(routes.listWorkspaces, {})).items;
      if (!workspaces.some((w) => w.name === "hello"))
        await api.call(routes.createWorkspace, { body: { name: "hello", pool: "default" } });

      // Loaded here, not by every command: the agent is most of the CLI's start-up.
      const { createLogger, loadAgentConfig, runAgent } = await import("@drover/agent");
      const agentConfig = loadAgentConfig({
        ...process.env,
        DROVER_TOKEN: poolToken,
        DROVER_URL: server.url,
        DROVER_AGENT_NAME: process.env.DROVER_AGENT_NAME ?? "quickstart-agent",
        DROVER_AGENT_DATA_DIR: join(dataDir, "agent", "data"),
        DROVER_AGENT_CACHE_DIR: join(dataDir, "agent", "cache"),
        DROVER_AGENT_HEALTH_PORT: process.env.DROVER_AGENT_HEALTH_PORT ?? "0",
        DROVER_AGENT_LOG_FORMAT: process.env.DROVER_AGENT_LOG_FORMAT ?? "plain",
      });
      const { agent, done } = await runAgent(agentConfig, createLogger(agentConfig.logFormat, agentConfig.debug), {
        handleSignals: false,
      });
      for (let i = 0; i < 200; i++) {
        const agents = (await api.call(routes.listAgents, { query: { pool: "default" } })).items;
        if (agents.some((a) => a.name === agentConfig.name && a.status !== "offline")) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const { cli, example, where } = quickstartCommands(process.cwd());
      process.stdout.write(
        [
          "",
          `Drover is running: server ${server.url} (SQLite in ${dataDir}), agent "${agentConfig.name}" in pool "default".`,
          ...(login.kept
            ? [
                `Your earlier login (${login.kept}, in ${login.keptIn}) is kept; the quickstart's is in ${login.credentials}.`,
                `In another terminal, ${where}:`,
                "",
                `  export DROVER_CONFIG_DIR=${login.configDir}`,
              ]
            : [`The CLI is logged in (${login.credentials}). In another terminal, ${where}:`, ""]),
          `  ${cli} run start ${example} --workspace hello --auto-apply`,
          `  ${cli} output --workspace hello`,
          `  ${cli} run list --workspace hello`,
          "",
          `Without --auto-apply the plan waits: ${cli} run confirm <run-id>, or confirm it in the web UI.`,
          "",
          `Web UI: ${server.url}/app — sign in with the admin token (${join(dataDir, "admin-token")}), or open`,
          `this link, which fills it in (keep it private): ${server.url}/app#token=${adminToken}`,
          "",
          "Press Ctrl-C to stop.",
          "",
        ].join("\n"),
      );
      let stopping = false;
      const stop = () => {
        if (stopping) process.exit(1);
        stopping = true;
        void agent.stop().finally(() => void server.close().then(() => process.exit(0)));
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
      await done;
    });
}
