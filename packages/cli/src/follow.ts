import { DroverError, logHeaders, maxLongPollMs, messageOf, routes, type Phase, type Run } from "@drover/protocol";
import { type DroverClient } from "@drover/runtime";
import { exitFollowLost, settled } from "./exit-codes.js";
import { io } from "./io.js";
import { writeWithBackpressure } from "./logs.js";
import { VisibleControls } from "./visible.js";

/** How a follow rides out a server that stops answering (a restart, a proxy's 502). */
export interface Reconnect {
  /** How long to keep retrying from the first failed call, in ms. */
  forMs: number;
  /** Where the one notice per outage goes. */
  notices: NodeJS.WritableStream;
  /** Waits between attempts; injectable, so a test's clock decides. */
  pause?: (ms: number) => Promise<void>;
  now?: () => number;
}

/** First pause after a failed call; it doubles up to the last. */
const firstPauseMs = 200;
const longestPauseMs = 3_000;

/**
 * Calls `call` until it answers; a `server_unreachable` failure is retried with backoff for
 * `reconnect.forMs` from the first one, then ends the command with exit code 3 and how to resume.
 * Every call of a follow reads from where the last answer left off, so a retried call neither
 * loses nor repeats a byte of the log.
 */
function retrying(runId: string, reconnect: Reconnect): <T>(call: () => Promise<T>) => Promise<T> {
  const now = reconnect.now ?? Date.now;
  const pause = reconnect.pause ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  return async (call) => {
    let since: number | undefined;
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!(err instanceof DroverError && err.code === "server_unreachable")) throw err;
        const at = now();
        since ??= at;
        const resume = `run ${runId} continues on the agent; resume with \`drover run logs ${runId} --follow\``;
        if (at - since >= reconnect.forMs) {
          io().exitCode = exitFollowLost;
          throw new DroverError(
            "server_unreachable",
            `gave up on the Drover server after ${Math.round((at - since) / 1000)} s (${messageOf(err)}); ${resume}`,
            { hint: "DROVER_CLIENT_RECONNECT_SECONDS sets how long the CLI keeps trying.", cause: err },
          );
        }
        if (attempt === 0)
          reconnect.notices.write(
            `drover: lost the Drover server (${messageOf(err)}); run ${runId} continues on the agent; ` +
              `retrying for up to ${Math.round(reconnect.forMs / 1000)} s\n`,
          );
        await pause(
          Math.min(firstPauseMs * 2 ** Math.min(attempt, 10), longestPauseMs, reconnect.forMs - (at - since)),
        );
      }
    }
  };
}

/**
 * Streams a run's logs as they are written (control characters made visible) — plan, then apply — until the run settles
 * (finished, or waiting for confirmation). Returns the run in its final state.
 */
export async function followRun(
  api: DroverClient,
  runId: string,
  out: NodeJS.WritableStream,
  reconnect: Reconnect,
  phases: Phase[] = ["plan", "apply"],
  seen?: (text: Buffer) => void,
): Promise<Run> {
  const retry = retrying(runId, reconnect);
  const getRun = () => retry(() => api.call(routes.getRun, { params: { id: runId } }));
  for (const phase of phases) {
    let offset = 0;
    const shown = new VisibleControls();
    // The run was seen settled after an empty read: one more read, at once, has the last word.
    let settledSeen = false;
    for (;;) {
      const wait = settledSeen ? 0 : Math.min(25_000, maxLongPollMs);
      // The server holds the read up to `wait`: the deadline starts counting after it.
      const res = await retry(() =>
        api.exchange(routes.runLogs, {
          params: { id: runId },
          query: { phase, offset, wait },
          timeoutMs: api.timeoutMs + wait,
        }),
      );
      const text = shown.push(res.result);
      seen?.(text);
      await writeWithBackpressure(out, text);
      offset = Number(res.headers[logHeaders.nextOffset] ?? offset);
      if (res.headers[logHeaders.complete] === "true") break;
      if (res.result.length === 0) {
        // A plan waiting for confirmation has no apply log yet: stop following there.
        if (settledSeen) break;
        // Not at once: bytes may have come between the read and now (a retried call can span an
        // outage in which the job wrote its last lines and ended).
        if (phase === "apply" && settled((await getRun()).status)) settledSeen = true;
      }
    }
    const rest = shown.end();
    seen?.(rest);
    await writeWithBackpressure(out, rest);
  }
  let run = await getRun();
  while (!settled(run.status)) {
    const wait = Math.min(25_000, maxLongPollMs);
    const status = run.status;
    // The server answers once the status moves on (or at the wait's end, unchanged).
    run = await retry(() =>
      api.call(routes.getRun, {
        params: { id: runId },
        query: { wait, status },
        timeoutMs: api.timeoutMs + wait,
      }),
    );
  }
  return run;
}
