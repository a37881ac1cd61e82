/**
 * What a `drover` process does when a reader of its standard output or error goes away (the end
 * of `| head`, a dead `tee`, a closed journald pipe): the writes fail with EPIPE. Unhandled, that
 * error ends the process half-way, or worse: pino's exit hook then retries its unwritten buffer
 * forever, and the process no longer answers SIGTERM. Installed once, for every process kind.
 */
let ownsProcess = false;

/**
 * Called by commands that run until signalled (server, agent, quickstart): a closed output
 * silences their lines, and nothing more; they go on serving and stop on SIGTERM/SIGINT.
 */
export function runsUntilSignalled(): void {
  ownsProcess = true;
}

/** Installs the handlers on the process's stdout and stderr. */
export function guardProcessOutput(): void {
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    if (ownsProcess) return;
    // A user command whose reader has all it wanted is done, as git and kubectl are.
    if (err.code === "EPIPE") process.exit(0);
    process.stderr.write(`drover: cannot write to standard output: ${err.message}\n`);
    process.exit(1);
  });
  // Nowhere is left to report a failing stderr: the line is dropped.
  process.stderr.on("error", () => undefined);
}
