import { DroverError } from "@drover/protocol";

/** Prints an error as one line on stderr: `drover: <code>: <message>` for our coded errors. */
export function printError(err: unknown): void {
  if (err instanceof DroverError) {
    process.stderr.write(`drover: ${err.message} (${err.code})\n`);
  } else if (err instanceof Error) {
    process.stderr.write(`drover: ${err.message}\n`);
  } else {
    process.stderr.write(`drover: ${String(err)}\n`);
  }
}
