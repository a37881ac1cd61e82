import { Worker } from "node:worker_threads";
import { DroverError, type PlanSummary } from "@drover/protocol";
import type { BodySource } from "./bodies.js";
import type { PlanJsonWorkerData, PlanJsonWorkerReply } from "./plan-json-worker.js";

/** The stored form of an uploaded plan JSON: its summary, and the document redacted. */
export interface RenderedPlanJson {
  summary: PlanSummary;
  /** Applying it would leave the workspace managing nothing (see destroysEverything). */
  destroysAll: boolean;
  json: Buffer;
}

const mib = 1024 * 1024;

/**
 * Heap the worker may use for a body of `size` bytes: parsed JSON takes several times its text
 * (numbers, short strings and small objects most). A body that needs more is refused rather
 * than allowed to exhaust the process.
 */
function heapLimitMb(size: number): number {
  return Math.max(256, Math.ceil((size * 16) / mib));
}

/**
 * Parses, summarises and redacts an uploaded plan JSON on a worker thread of its own, so the
 * server keeps answering meanwhile. Not JSON: invalid_json. Too big to parse within its heap
 * limit: payload_too_large.
 */
export function renderPlanJson(source: BodySource, size: number, sensitiveValues: string[]): Promise<RenderedPlanJson> {
  const data: PlanJsonWorkerData = {
    source: Buffer.isBuffer(source) ? { bytes: new Uint8Array(source) } : { path: source.path },
    sensitiveValues,
  };
  const worker = new Worker(new URL("./plan-json-worker.js", import.meta.url), {
    workerData: data,
    resourceLimits: { maxOldGenerationSizeMb: heapLimitMb(size) },
  });
  return new Promise<RenderedPlanJson>((resolve, reject) => {
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      outcome();
    };
    worker.once("message", (reply: PlanJsonWorkerReply) =>
      settle(() => {
        if (reply.kind === "invalid_json") {
          reject(new DroverError("invalid_json", `the plan JSON is not valid JSON (${reply.message})`));
        } else {
          const { buffer, byteOffset, byteLength } = reply.json;
          resolve({
            summary: reply.summary,
            destroysAll: reply.destroysAll,
            json: Buffer.from(buffer, byteOffset, byteLength),
          });
        }
      }),
    );
    worker.once("error", (err: Error & { code?: string }) =>
      settle(() =>
        reject(
          err.code === "ERR_WORKER_OUT_OF_MEMORY"
            ? new DroverError(
                "payload_too_large",
                `the plan JSON (${size} bytes) needs more memory to parse than the server gives it (${heapLimitMb(size)} MiB); ` +
                  "the run has no plan JSON, its counts come from terraform's summary",
                { cause: err },
              )
            : err,
        ),
      ),
    );
    worker.once("exit", (code) =>
      settle(() => reject(new Error(`the plan JSON worker exited (${code}) without answering`))),
    );
  });
}
