import { logHeaders, maxLongPollMs, runSchema, type Phase, type Run } from "@drover/protocol";
import type { ApiClient } from "./api-client.js";
import { settled } from "./exit-codes.js";
import { writeWithBackpressure } from "./logs.js";

/**
 * Streams a run's logs as they are written — plan, then apply — until the run settles
 * (finished, or waiting for confirmation). Returns the run in its final state.
 */
export async function followRun(api: ApiClient, runId: string, out: NodeJS.WritableStream, phases: Phase[] = ["plan", "apply"]): Promise<Run> {
  for (const phase of phases) {
    let offset = 0;
    for (;;) {
      const res = await api.raw("GET", `/api/v1/runs/${runId}/logs?phase=${phase}&offset=${offset}&wait=${Math.min(25_000, maxLongPollMs)}`);
      await writeWithBackpressure(out, res.body);
      offset = Number(res.headers[logHeaders.nextOffset] ?? offset);
      if (res.headers[logHeaders.complete] === "true") break;
      if (res.body.length === 0) {
        const run = await api.json(runSchema, "GET", `/api/v1/runs/${runId}`);
        // A plan waiting for confirmation has no apply log yet: stop following there.
        if (phase === "apply" && settled(run.status)) break;
      }
    }
  }
  for (;;) {
    const run = await api.json(runSchema, "GET", `/api/v1/runs/${runId}`);
    if (settled(run.status)) return run;
    await new Promise((r) => setTimeout(r, 200));
  }
}
