import { DroverClient, DroverError } from "@drover/protocol";
import type { Command } from "commander";
import { resolveSettings } from "./settings.js";

/** Options every user command takes. */
export interface CommonOptions {
  url?: string;
  token?: string;
  json?: boolean;
  /** Seconds each API call may take (--timeout). */
  timeout?: string;
}

/** Default of --timeout, in seconds. */
export const defaultTimeoutSeconds = 60;

export function withCommon(cmd: Command): Command {
  return cmd.option("--url <url>", "server URL (DROVER_URL)").option("--token <token>", "API token (DROVER_TOKEN)").option("--json", "print JSON for scripts").option("--timeout <seconds>", `give up on an API call the server has not answered after this many seconds (default ${defaultTimeoutSeconds})`);
}

/** The API client of a command: its settings and its per-call deadline. */
export function apiFor(opts: CommonOptions): DroverClient {
  const { url, token } = resolveSettings({ url: opts.url, token: opts.token });
  return new DroverClient({ baseUrl: url, token, timeoutMs: timeoutMs(opts.timeout) });
}

/** --timeout in ms; anything but a positive number of seconds is refused before a call is made. */
export function timeoutMs(seconds: string | undefined): number {
  if (seconds === undefined) return defaultTimeoutSeconds * 1000;
  const value = Number(seconds);
  if (!/^\d+(\.\d+)?$/.test(seconds.trim()) || !(value > 0)) throw new DroverError("bad_request", `--timeout must be a positive number of seconds, not ${JSON.stringify(seconds)}`);
  return Math.round(value * 1000);
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
