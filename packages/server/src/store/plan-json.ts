import { Worker } from "node:worker_threads";
import { DroverError, type PlanSummary } from "@drover/protocol";
import type { BodySource } from "./bodies.js";
import type { PlanJsonReply, PlanJsonRequest } from "./plan-json-worker.js";

/** The stored form of an uploaded plan JSON: its summary, and the document redacted. */
export interface RenderedPlanJson {
  summary: PlanSummary;
  /** Applying it would leave the workspace managing nothing (see destroysEverything). */
  destroysAll: boolean;
  json: Buffer;
}

const mib = 1024 * 1024;
/** The heap of the thread every plan JSON shares: enough for bodies up to 16 MiB (heapLimitMb). */
const sharedHeapMb = 256;

/**
 * How long one document may take to render: several times what a plan of the default size
 * limit takes on a busy machine, and within the agent's deadline for the upload (60 s), so the
 * agent is told why rather than timing out and sending it again. Past it the thread is ended (a
 * stuck one would hold every upload behind it).
 */
export const renderDeadlineMs = 30_000;

/**
 * Heap a thread needs for a body of `size` bytes: parsed JSON takes several times its text
 * (numbers, short strings and small objects most). A body that needs more is refused rather
 * than allowed to exhaust the process.
 */
function heapLimitMb(size: number): number {
  return Math.max(sharedHeapMb, Math.ceil((size * 16) / mib));
}

interface Pending {
  request: PlanJsonRequest;
  size: number;
  heapMb: number;
  deadlineMs: number;
  resolve(rendered: RenderedPlanJson): void;
  reject(err: Error): void;
}

/**
 * A worker thread that renders plan JSONs one after another. It starts with the first
 * document and is kept while documents keep coming: starting a thread and loading its modules
 * costs more than rendering a plan of a few hundred resources. After `idleMs` without work it
 * ends, and the next document starts a new one; so does a document that exhausted its heap.
 */
export class PlanJsonThread {
  private worker: Worker | undefined;
  private current: Pending | undefined;
  private readonly waiting: Pending[] = [];
  private idleTimer: NodeJS.Timeout | undefined;
  private deadlineTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly heapMb: number,
    /** How long the thread is kept without work. */
    private readonly idleMs: number,
    /** How long a document of `size` bytes may take to render. */
    private readonly deadlineMs: (size: number) => number = () => renderDeadlineMs,
  ) {}

  /** Threads started so far (a thread that ended is replaced by a new one on demand). */
  started = 0;

  /** Whether a thread is up (working, or idle and kept). */
  get running(): boolean {
    return this.worker !== undefined;
  }

  /**
   * Parses, summarises and redacts one plan JSON. Not JSON: invalid_json. Too big to parse
   * within the thread's heap, or to render within its deadline: payload_too_large.
   */
  render(source: BodySource, size: number, sensitiveValues: string[]): Promise<RenderedPlanJson> {
    const request: PlanJsonRequest = {
      source: Buffer.isBuffer(source) ? { bytes: new Uint8Array(source) } : { path: source.path },
      sensitiveValues,
    };
    return new Promise((resolve, reject) => {
      this.waiting.push({ request, size, heapMb: this.heapMb, deadlineMs: this.deadlineMs(size), resolve, reject });
      this.next();
    });
  }

  /** Ends the thread now; documents not rendered yet are refused. */
  async close(): Promise<void> {
    clearTimeout(this.idleTimer);
    clearTimeout(this.deadlineTimer);
    const stopping = new Error("the plan JSON thread was closed");
    for (const p of [...(this.current ? [this.current] : []), ...this.waiting.splice(0)]) p.reject(stopping);
    this.current = undefined;
    const worker = this.worker;
    this.worker = undefined;
    await worker?.terminate();
  }

  private next(): void {
    if (this.current) return;
    const pending = this.waiting.shift();
    if (!pending) return this.idle();
    clearTimeout(this.idleTimer);
    this.current = pending;
    const worker = this.worker ?? this.start();
    // A thread with work keeps the process alive until it answers; an idle one does not.
    worker.ref();
    // The bytes are this request's own copy (see render): moved to the thread, not copied again.
    const { source } = pending.request;
    worker.postMessage(pending.request, "bytes" in source ? [source.bytes.buffer as ArrayBuffer] : []);
    this.deadlineTimer = setTimeout(() => {
      this.settle(worker, true, (p) => p.reject(overdue(p)));
      void worker.terminate();
    }, pending.deadlineMs);
  }

  private idle(): void {
    const worker = this.worker;
    if (!worker) return;
    worker.unref();
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.worker === worker && !this.current) void this.end(worker);
    }, this.idleMs);
    this.idleTimer.unref();
  }

  private async end(worker: Worker): Promise<void> {
    this.worker = undefined;
    await worker.terminate();
  }

  private start(): Worker {
    const worker = new Worker(new URL("./plan-json-worker.js", import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: this.heapMb },
    });
    this.worker = worker;
    this.started++;
    worker.on("message", (reply: PlanJsonReply) => this.settle(worker, false, (p) => answer(p, reply)));
    // An error ends the thread (an exit follows): the next document gets a new one.
    worker.on("error", (err: Error & { code?: string }) => this.settle(worker, true, (p) => p.reject(failure(p, err))));
    worker.once("exit", (code) =>
      this.settle(worker, true, (p) => p.reject(new Error(`the plan JSON worker exited (${code}) without answering`))),
    );
    return worker;
  }

  /** Ends the current document of `worker` with `outcome`, and goes on with the next one. */
  private settle(worker: Worker, ended: boolean, outcome: (p: Pending) => void): void {
    // A thread already replaced (or ended on purpose) answers for nothing.
    if (this.worker !== worker) return;
    clearTimeout(this.deadlineTimer);
    if (ended) this.worker = undefined;
    const p = this.current;
    this.current = undefined;
    if (p) outcome(p);
    this.next();
  }
}

function answer(p: Pending, reply: PlanJsonReply): void {
  if (reply.kind === "invalid_json") {
    p.reject(new DroverError("invalid_json", reply.message));
    return;
  }
  const { buffer, byteOffset, byteLength } = reply.json;
  p.resolve({
    summary: reply.summary,
    destroysAll: reply.destroysAll,
    json: Buffer.from(buffer, byteOffset, byteLength),
  });
}

function overdue(p: Pending): DroverError {
  return new DroverError(
    "payload_too_large",
    `the plan JSON (${p.size} bytes) took longer than ${p.deadlineMs / 1000} s to render; ` +
      "the run has no plan JSON, its counts come from terraform's summary",
  );
}

function failure(p: Pending, err: Error & { code?: string }): Error {
  if (err.code !== "ERR_WORKER_OUT_OF_MEMORY") return err;
  return new DroverError(
    "payload_too_large",
    `the plan JSON (${p.size} bytes) needs more memory to parse than the server gives it (${p.heapMb} MiB); ` +
      "the run has no plan JSON, its counts come from terraform's summary",
    { cause: err },
  );
}

/** Keeps the thread of bodies up to 16 MiB for a minute after its last document. */
const shared = new PlanJsonThread(sharedHeapMb, 60_000);

/**
 * Renders an uploaded plan JSON off the event loop: on the shared thread, or, for a body that
 * needs a larger heap than it has, on a thread of its own that ends with it.
 */
export async function renderPlanJson(
  source: BodySource,
  size: number,
  sensitiveValues: string[],
): Promise<RenderedPlanJson> {
  const heapMb = heapLimitMb(size);
  if (heapMb === sharedHeapMb) return shared.render(source, size, sensitiveValues);
  const own = new PlanJsonThread(heapMb, 0);
  try {
    return await own.render(source, size, sensitiveValues);
  } finally {
    await own.close();
  }
}
