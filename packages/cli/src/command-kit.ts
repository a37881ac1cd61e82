import type { Command } from "commander";
import { ApiClient } from "./api-client.js";
import { resolveSettings } from "./settings.js";

/** Options every user command takes. */
export interface CommonOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

export function withCommon(cmd: Command): Command {
  return cmd.option("--url <url>", "server URL (DROVER_URL)").option("--token <token>", "API token (DROVER_TOKEN)").option("--json", "print JSON for scripts");
}

export function apiFor(opts: CommonOptions): ApiClient {
  return new ApiClient(resolveSettings({ url: opts.url, token: opts.token }));
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
