import { AsyncLocalStorage } from "node:async_hooks";

/** Where a user command reads its settings and input, writes its output, and leaves its exit code. */
export interface CliIo {
  env: NodeJS.ProcessEnv;
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  /** What the command exits with when it throws nothing. */
  exitCode: number;
}

const current = new AsyncLocalStorage<CliIo>();

/**
 * The io of the command running in this async context: the caller's within `withIo` (a program
 * embedding the CLI, several commands at once), else the process's own.
 */
export function io(): CliIo {
  return current.getStore() ?? processIo;
}

/** Runs `fn` with `given` as every `io()` it reaches, awaited or not. */
export function withIo<T>(given: CliIo, fn: () => Promise<T>): Promise<T> {
  return current.run(given, fn);
}

const processIo: CliIo = {
  get env() {
    return process.env;
  },
  // Read on use: touching process.stdin opens it.
  get stdin() {
    return process.stdin;
  },
  get stdout() {
    return process.stdout;
  },
  get stderr() {
    return process.stderr;
  },
  get exitCode() {
    return Number(process.exitCode ?? 0);
  },
  set exitCode(code: number) {
    process.exitCode = code;
  },
};
