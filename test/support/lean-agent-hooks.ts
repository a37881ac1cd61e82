import { appendFileSync } from "node:fs";

// Module hook of lean-agent-recorder.ts, run on Node's loader thread: appends the URL of every
// module the process loads through the ESM loader to the file the process's environment names.
type Next = (url: string, context: unknown) => Promise<unknown>;

/** Records `url`, then loads it as Node would. */
export async function load(url: string, context: unknown, next: Next): Promise<unknown> {
  const file = process.env.LEAN_AGENT_MODULE_LOG;
  if (file) appendFileSync(file, `${url}\n`);
  return next(url, context);
}
