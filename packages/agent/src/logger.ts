import { pino, type Logger } from "pino";
import { logDestination } from "@drover/runtime";
import type { LogFormat } from "./config.js";

/** The agent's own log (not a run's log): JSON for collectors, one line per event otherwise (on stderr). */
export function createLogger(format: LogFormat, debug: boolean): Logger {
  const level = debug ? "debug" : "info";
  const readable = logDestination(format, process.stderr);
  // JSON through process.stdout, as the server's log: see there why not pino's own writer.
  if (!readable) return pino({ level, base: { component: "drover-agent" } }, process.stdout);
  return pino({ level, base: undefined, timestamp: false }, readable);
}
