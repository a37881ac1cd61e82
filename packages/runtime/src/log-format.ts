import type { LogFormat } from "@drover/protocol";

/*
 * How every Drover process writes its own log (not a run's): pino's JSON lines for collectors,
 * or one readable line per event for a terminal. The readable form is written here rather than
 * with pino-pretty: it is a few lines, and a process needs no other dependency for it.
 */

// pino's numeric levels; custom levels are not used by any Drover process.
const levelNames: Readonly<Record<number, string>> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};

/** One value of a readable line: text as it is, an error by its message, anything else as JSON. */
function shown(value: unknown): string {
  if (typeof value === "string") return value;
  if (value !== null && typeof value === "object" && typeof (value as { message?: unknown }).message === "string")
    return (value as { message: string }).message;
  return JSON.stringify(value);
}

/**
 * A pino JSON line as one readable line: `LEVEL message key=value …` (`dev`: the time of day
 * first). `time`, `pid` and `hostname` are left out: a terminal or journald shows the time.
 */
export function readableLogLine(json: string, format: "plain" | "dev", now: Date = new Date()): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const { level, msg, time, pid, hostname, ...rest } = entry;
  void pid;
  void hostname;
  const name = typeof level === "number" ? (levelNames[level] ?? String(level)) : String(level);
  const extras = Object.entries(rest)
    .map(([k, v]) => `${k}=${shown(v)}`)
    .join(" ");
  const at = typeof time === "number" ? new Date(time) : now;
  const clock = format === "dev" ? `${at.toISOString().slice(11, 23)} ` : "";
  return `${clock}${name} ${typeof msg === "string" ? msg : ""}${extras ? ` ${extras}` : ""}`;
}

/**
 * The destination a pino logger writes to in `format`: undefined for `json` (pino's own, on
 * standard output), else a stream that writes readable lines to `out`.
 */
export function logDestination(
  format: LogFormat,
  out: NodeJS.WritableStream,
): { write(line: string): void } | undefined {
  if (format === "json") return undefined;
  return { write: (line: string) => void out.write(readableLogLine(line, format) + "\n") };
}

/** The format of a process whose setting is unset: readable on a terminal, JSON for a pipe or a file. */
export function defaultLogFormat(isTty: boolean | undefined): LogFormat {
  return isTty === true ? "plain" : "json";
}
