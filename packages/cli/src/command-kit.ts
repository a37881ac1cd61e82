import { escapeControlChars, settings } from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import type { Command } from "commander";
import { io } from "./io.js";
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
  return cmd
    .option("--url <url>", "server URL (DROVER_URL)")
    .option("--token <token>", "API token (DROVER_TOKEN)")
    .option("--json", "print JSON for scripts")
    .option(
      "--timeout <seconds>",
      `give up on an API call the server has not answered after this many seconds (DROVER_CLIENT_TIMEOUT_SECONDS, default ${settings.DROVER_CLIENT_TIMEOUT_SECONDS.default})`,
    );
}

/** The API client of a command: its settings and its per-call deadline. */
export function apiFor(opts: CommonOptions): DroverClient {
  const { env } = io();
  const { url, token } = resolveSettings({ url: opts.url, token: opts.token }, env);
  return new DroverClient({ baseUrl: url, token, timeoutMs: resolveTimeoutMs({ timeout: opts.timeout }, env) });
}

/**
 * JSON text of `data` that no terminal acts on: JSON.stringify escapes C0 controls but leaves
 * DEL, C1 controls (U+009B is a CSI to some terminals) and bidi overrides; they are escaped too.
 */
export function jsonText(data: unknown): string {
  const escaped = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
  return JSON.stringify(data, null, 2).replace(/[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, escaped);
}

/**
 * Prints `data` as JSON with --json (control characters escaped), else the human rendering
 * with control characters made visible: names, messages and values come from runs (N9).
 */
export function emit<T>(opts: CommonOptions, data: T, human: (d: T) => string): void {
  io().stdout.write(opts.json ? jsonText(data) + "\n" : escapeControlChars(human(data)) + "\n");
}

/** A plain text table. */
export function table(headers: string[], rows: string[][]): string {
  if (rows.length === 0) return "(none)";
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}
