import { DroverError, escapeControlChars } from "@drover/protocol";
import { io } from "./io.js";

/**
 * Prints an error as one line on stderr: `drover: <message> (<code>) <hint>` for our coded errors.
 * A message may quote what a run or a server sent: its control characters are made visible.
 */
export function printError(err: unknown): void {
  const write = (line: string) => io().stderr.write(`${escapeControlChars(line)}\n`);
  if (err instanceof DroverError) {
    // One line, the hint last: what happened, its code for scripts and searches, what to do.
    write(`drover: ${err.message} (${err.code})${err.hint ? ` ${err.hint}` : ""}`);
  } else if (err instanceof Error) {
    write(`drover: ${err.message}`);
  } else {
    write(`drover: ${String(err)}`);
  }
}
