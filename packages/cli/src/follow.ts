import { logHeaders, maxLongPollMs, routes, type Phase, type Run } from "@drover/protocol";
import { type DroverClient } from "@drover/runtime";
import { settled } from "./exit-codes.js";
import { writeWithBackpressure } from "./logs.js";
import { VisibleControls } from "./visible.js";

/**
 * Streams a run's logs as they are written (control characters made visible) — plan, then apply — until the run settles
 * (finished, or waiting for confirmation). Returns the run in its final state.
 */
export async function followRun(
  api: DroverClient,
  runId: string,
  out: NodeJS.WritableStream,
  phases: Phase[] = ["plan", "apply"],
  seen?: (text: Buffer) => void,
): Promise<Run> {
  for (const phase of phases) {
    let offset = 0;
    const shown = new VisibleControls();
    for (;;) {
      const wait = Math.min(25_000, maxLongPollMs);
      // The server holds the read up to `wait`: the deadline starts counting after it.
      const res = await api.exchange(routes.runLogs, {
        params: { id: runId },
        query: { phase, offset, wait },
        timeoutMs: api.timeoutMs + wait,
      });
      const text = shown.push(res.result);
      seen?.(text);
      await writeWithBackpressure(out, text);
      offset = Number(res.headers[logHeaders.nextOffset] ?? offset);
      if (res.headers[logHeaders.complete] === "true") break;
      if (res.result.length === 0) {
        const run = await api.call(routes.getRun, { params: { id: runId } });
        // A plan waiting for confirmation has no apply log yet: stop following there.
        if (phase === "apply" && settled(run.status)) break;
      }
    }
    const rest = shown.end();
    seen?.(rest);
    await writeWithBackpressure(out, rest);
  }
  let run = await api.call(routes.getRun, { params: { id: runId } });
  while (!settled(run.status)) {
    const wait = Math.min(25_000, maxLongPollMs);
    // The server answers once the status moves on (or at the wait's end, unchanged).
    run = await api.call(routes.getRun, {
      params: { id: runId },
      query: { wait, status: run.status },
      timeoutMs: api.timeoutMs + wait,
    });
  }
  return run;
}
