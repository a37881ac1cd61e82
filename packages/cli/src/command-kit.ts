import { DroverClient, settings } from "@drover/protocol";
import type { Command } from "commander";
import { resolveSettings, resolveTimeoutMs } from "./settings.js";

/** Options every user command takes. */
export interface CommonOptions {
  url?: string;
  token?: string;
  json?: boolean;
  /** Seconds each API call may take (--timeout, DROVER_CLIENT_TIMEOUT_SECONDS). */
  timeout?: string;
}

export function withCommon(cmd: Command): Command {
  return cmd.option("--url <url>", "server URL (DROVER_URL)").option("--token <token>", "API token (DROVER_TOKEN)").option("--json", "print JSON for scripts").option("--timeout <seconds>", `give up on an API call the server has not answered after this many seconds (DROVER_CLIENT_TIMEOUT_SECONDS, default ${settings.DROVER_CLIENT_TIMEOUT_SECONDS.default})`);
}

/** The API client of a command: its settings and its per-call deadline. */
export function apiFor(opts: CommonOptions): DroverClient {
  const { url, token } = resolveSettings({ url: opts.url, token: opts.token });
  return new DroverClient({ baseUrl: url, token, timeoutMs: resolveTimeoutMs({ timeout: opts.timeout }) });
}

/** Prints `data` as JSON with --json, else the human rendering. */
export function emit<T>(opts: CommonOptions, data: T, human: (d: T) => string): void {
  process.stdout.write(opts.json ? JSON.stringify(data, null, 2) + "\n" : human(data) + "\n");
}

/** A plain text table. */
export function table(headers: string[], rows: string[][]): string {
  if (rows.length === 0) return "(none)";
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}
