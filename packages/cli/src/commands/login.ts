import { DroverError, routes, SettingsSource, settingParsers } from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import type { Command } from "commander";
import { io } from "../io.js";
import { readSecret } from "../secret-input.js";
import { resolveTimeoutMs, writeCredentials } from "../settings.js";

interface LoginOptions {
  url: string;
  token?: string;
  tokenFile?: string;
  tokenStdin?: boolean;
  json?: boolean;
  timeout?: string;
}

/** `drover login --url U --token-file F` (or --token-stdin): checks the token, then stores both for later commands. */
export function registerLoginCommand(program: Command): void {
  program
    .command("login")
    .description("Store the server URL and API token for later commands")
    .requiredOption("--url <url>", "server URL")
    .option("--token-file <path>", "read the API token from this file ('-' for standard input)")
    .option("--token-stdin", "read the API token from standard input")
    .option(
      "--token <token>",
      "API token (visible to other users in the process list: prefer --token-file or --token-stdin)",
    )
    .option("--json", "print JSON")
    .option(
      "--timeout <seconds>",
      "give up on checking the token when the server has not answered after this many seconds (DROVER_CLIENT_TIMEOUT_SECONDS)",
    )
    .action(async (opts: LoginOptions) => {
      const given = [opts.token !== undefined, opts.tokenFile !== undefined, opts.tokenStdin === true].filter(
        Boolean,
      ).length;
      if (given !== 1)
        throw new DroverError(
          "bad_request",
          "give the API token once: --token-file <path>, --token-stdin, or --token <token>",
        );
      // Checked as every other command checks --url and --token, before anything is sent.
      const url = new SettingsSource({}, { url: opts.url }).get("DROVER_URL") as string;
      const token =
        opts.token === undefined
          ? settingParsers.token(
              await readSecret(opts.tokenStdin ? "-" : (opts.tokenFile as string), "API token"),
              `the API token read from ${opts.tokenStdin || opts.tokenFile === "-" ? "standard input" : opts.tokenFile}`,
            )
          : (new SettingsSource({}, { token: opts.token }).get("DROVER_TOKEN") as string);
      const settings = { url, token };
      const timeoutMs = resolveTimeoutMs({ timeout: opts.timeout }, io().env);
      await new DroverClient({ baseUrl: settings.url, token, timeoutMs }).call(routes.listPools, {});
      const path = writeCredentials(settings, io().env);
      io().stdout.write(
        opts.json
          ? JSON.stringify({ url: settings.url, credentials: path }) + "\n"
          : `Logged in to ${settings.url} (credentials in ${path})\n`,
      );
    });
}
