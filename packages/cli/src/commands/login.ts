import { listOf, poolSchema } from "@drover/protocol";
import type { Command } from "commander";
import { ApiClient } from "../api-client.js";
import { writeCredentials } from "../settings.js";

/** `drover login --url U --token T`: checks the token, then stores both for later commands. */
export function registerLoginCommand(program: Command): void {
  program
    .command("login")
    .description("Store the server URL and API token for later commands")
    .requiredOption("--url <url>", "server URL")
    .requiredOption("--token <token>", "API token")
    .option("--json", "print JSON")
    .action(async (opts: { url: string; token: string; json?: boolean }) => {
      const settings = { url: opts.url.replace(/\/+$/, ""), token: opts.token };
      await new ApiClient(settings).json(listOf(poolSchema), "GET", "/api/v1/pools");
      const path = writeCredentials(settings);
      process.stdout.write(opts.json ? JSON.stringify({ url: settings.url, credentials: path }) + "\n" : `Logged in to ${settings.url} (credentials in ${path})\n`);
    });
}
