import { DroverError } from "@drover/protocol";

/** Prints an error as one line on stderr: `drover: <message> (<code>) <hint>` for our coded errors. */
export function printError(err: unknown): void {
  if (err instanceof DroverError) {
    // One line, the hint last: what happened, its code for scripts and searches, what to do.
    process.stderr.write(`drover: ${err.message} (${err.code})${err.hint ? ` ${err.hint}` : ""}\n`);
  } else if (err instanceof Error) {
    process.stderr.write(`drover: ${err.message}\n`);
  } else {
    process.stderr.write(`drover: ${String(err)}\n`);
  }
}
