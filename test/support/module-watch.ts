// Preloaded with `node --import` into a process under test: records to $DROVER_TEST_MODULE_LOG
// every module URL it resolves, so a test can tell which code the process loaded (OpenTelemetry
// only when asked for, say). The same file is the hooks module (off the main thread).
import { appendFileSync } from "node:fs";
import { register } from "node:module";
import { isMainThread } from "node:worker_threads";

type Resolve = (
  specifier: string,
  context: unknown,
  next: (s: string, c: unknown) => Promise<{ url: string }>,
) => Promise<{ url: string }>;

/** The resolve hook. */
export const resolve: Resolve = async (specifier, context, next) => {
  const result = await next(specifier, context);
  const log = process.env.DROVER_TEST_MODULE_LOG;
  if (log) appendFileSync(log, `${result.url}\n`);
  return result;
};

if (isMainThread) register(import.meta.url);
