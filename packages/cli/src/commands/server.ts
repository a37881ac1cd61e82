import type { Command } from "commander";
import { DroverError, oneLineError } from "@drover/protocol";
import { settingsOrExit } from "../settings-errors.js";
import { runsUntilSignalled } from "../stdio.js";

interface ServerOptions {
  dataDir?: string;
  host?: string;
  port?: string;
  databaseUrl?: string;
  publicUrl?: string;
  logLevel?: string;
  logFormat?: string;
  tlsCert?: string;
  tlsKey?: string;
}

/** `drover server`: the control plane. Runs until SIGINT/SIGTERM. */
export function registerServerCommand(program: Command): void {
  program
    .command("server")
    .description(
      "Run the Drover server (SQLite under --data-dir by default; DROVER_DATABASE_URL=postgres://… for PostgreSQL)",
    )
    .option("--data-dir <dir>", "where the SQLite database lives (DROVER_DATA_DIR, default ./.drover)")
    .option("--host <host>", "address to listen on (DROVER_HOST, default 127.0.0.1)")
    .option("--port <port>", "port to listen on (DROVER_PORT, default 8800)")
    .option("--database-url <url>", "postgres://… or sqlite:<path> (DROVER_DATABASE_URL)")
    .option("--public-url <url>", "how agents reach this server; embedded in pool tokens (DROVER_PUBLIC_URL)")
    .option("--tls-cert <file>", "serve HTTPS with this certificate, PEM (DROVER_TLS_CERT_FILE)")
    .option("--tls-key <file>", "the private key of --tls-cert, PEM (DROVER_TLS_KEY_FILE)")
    .option("--log-level <level>", "pino log level (DROVER_LOG_LEVEL, default info)")
    .option(
      "--log-format <format>",
      "json, plain or dev (DROVER_LOG_FORMAT; default plain on a terminal, json otherwise)",
    )
    .action(async (opts: ServerOptions) => {
      runsUntilSignalled();
      // Loaded here, not at start-up: agents and user commands never pay for the server.
      const { loadServerConfig, startServer } = await import("@drover/server");
      const config = settingsOrExit("server", () => loadServerConfig({ env: process.env, flags: opts }));
      let server;
      try {
        server = await startServer(config);
      } catch (err) {
        // One line for the operator: a coded error (lock held, read-only or full data
        // directory) is a configuration problem (exit 2); anything else failed to start (exit 1).
        process.stderr.write(`drover server: ${oneLineError(err)}\n`);
        process.exit(err instanceof DroverError ? 2 : 1);
      }
      process.stdout.write(`Drover server listening on ${server.url}\n`);
      await new Promise<void>((resolve) => {
        let stopping = false;
        const stop = () => {
          if (stopping) process.exit(1);
          stopping = true;
          void server.close().then(resolve);
        };
        process.on("SIGINT", stop);
        process.on("SIGTERM", stop);
      });
    });
}
