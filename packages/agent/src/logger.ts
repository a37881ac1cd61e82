import { pino, type Logger } from "pino";
import type { LogFormat } from "./config.js";

/** The agent's own log (not a run's log): JSON for collectors, one line per event otherwise. */
export function createLogger(format: LogFormat, debug: boolean): Logger {
  const level = debug ? "debug" : "info";
  // Through process.stdout, as the server's log: see there why not pino's own writer.
  if (format === "json") return pino({ level, base: { component: "drover-agent" } }, process.stdout);
  return pino(
    { level, base: undefined, timestamp: false },
    {
      write(line: string) {
        const {
          level: lv,
          msg,
          ...rest
        } = JSON.parse(line) as { level: number; msg?: string } & Record<string, unknown>;
        const name = pino.levels.labels[lv] ?? String(lv);
        const extras = Object.entries(rest)
          .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
          .join(" ");
        const time = format === "dev" ? new Date().toISOString().slice(11, 23) + " " : "";
        process.stderr.write(`${time}${name.toUpperCase()} ${msg ?? ""}${extras ? ` ${extras}` : ""}\n`);
      },
    },
  );
}
