import type { RunTracer, SpanAttributes, SpanHandle } from "@drover/runtime";
import { messageOf } from "@drover/protocol";
import { withRetry } from "../session/client.js";
import type { JobContext, Retry } from "./context.js";

/** One named stage of a job. */
export interface Stage {
  readonly name: string;
  /**
   * What the stage retries. "server calls": each call it makes to the server, on a network
   * error (or 5xx/429), until the job's work ends; a transfer (JobClient) within its own budget,
   * with a deadline that grows with what it sends. "nothing": it runs terraform or a hook, once
   * (an apply or a hook is not known to be repeatable), and calls the server at most once.
   */
  readonly retries: "server calls" | "nothing";
  /** Whether the stage runs in this job; unset: always. */
  when?(c: JobContext): boolean;
  /** Does the stage's work; may return attributes for its span. */
  run(c: JobContext, retry: Retry): Promise<SpanAttributes | void>;
}

/** Where a pipeline ended early: the stage that failed, or the one it did not start. */
export class StageError extends Error {
  constructor(
    readonly stage: string,
    /** True when the stage had not started (the job was interrupted before it). */
    readonly before: boolean,
    override readonly cause: unknown,
  ) {
    super(`${before ? "before" : "in"} stage ${stage}: ${messageOf(cause)}`, { cause });
  }
}

/** How a pipeline learns that the job must end, and where its spans go. */
export interface PipelineHooks {
  /** Why the job must end now (cancel, agent stop, lease lost), or undefined: asked before every stage. */
  interruption(): Error | undefined;
  tracer: RunTracer;
  parent: SpanHandle | undefined;
  /** Told each stage as it starts (what a job reports on failure, and tests observe). */
  onStage?(name: string): void;
}

/**
 * Runs the stages in order. Before each one the job's one interruption check runs: a stop,
 * cancel or lost lease ends the pipeline there, and no further stage starts. A stage that
 * throws ends it too. Either way the StageError thrown names the stage; its span (one per stage
 * that ran) ends marked failed.
 */
export async function runPipeline(stages: readonly Stage[], c: JobContext, h: PipelineHooks): Promise<void> {
  for (const stage of stages) {
    const stop = h.interruption();
    if (stop) throw new StageError(stage.name, true, stop);
    if (stage.when && !stage.when(c)) continue;
    h.onStage?.(stage.name);
    const span = h.tracer.start(stage.name, h.parent);
    const retry: Retry =
      stage.retries === "server calls" ? (work) => withRetry(() => work(c.signal), c.signal) : (work) => work(c.signal);
    try {
      const attributes = await stage.run(c, retry);
      span.end(attributes ?? undefined);
    } catch (err) {
      span.end(undefined, messageOf(err).split("\n")[0]);
      throw new StageError(stage.name, false, err);
    }
  }
}
