import { Readable, Writable } from "node:stream";
import { runCli } from "@drover/cli/program";

/** What a CLI call left: its exit code and everything it printed. */
export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a user command (`drover run start …`, `workspace …`) inside this process with `env` as
 * its environment and its output captured: for tests whose subject is the server or the agent,
 * without a cold start of the CLI per call. Tests of the binary itself use `runDrover`.
 */
export async function runCliInProcess(args: string[], env: NodeJS.ProcessEnv, stdin = ""): Promise<CliResult> {
  const stdout = collector();
  const stderr = collector();
  const io = {
    env,
    stdin: Readable.from([Buffer.from(stdin)]),
    stdout: stdout.stream,
    stderr: stderr.stream,
    exitCode: 0,
  };
  const code = await runCli(args, io);
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}

function collector(): { stream: Writable; text(): string } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
      done();
    },
  });
  // Decoded once at the end, so a character split across two writes stays whole.
  return { stream, text: () => Buffer.concat(chunks).toString("utf8") };
}
