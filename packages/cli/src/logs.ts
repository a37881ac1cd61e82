import { DroverError, logHeaders, routes, type Phase, messageOf } from "@drover/protocol";
import { type DroverClient } from "@drover/runtime";
import { once } from "node:events";
import { Writable } from "node:stream";
import { VisibleControls } from "./visible.js";

/** Bytes asked for per page: a bound on what the CLI holds in memory at once. */
export const logPageBytes = 1024 * 1024;

/** How one phase's log read ended. */
export interface PhaseRead {
  bytes: number;
  /** The job has ended and every byte of its log was printed. */
  complete: boolean;
}

/** A destination for a log that keeps it in memory, for a command that prints it as data (--json). */
export class TextSink extends Writable {
  private readonly chunks: Buffer[] = [];
  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.chunks.push(chunk);
    done();
  }
  /** What was written, as UTF-8 text. */
  text(): string {
    return Buffer.concat(this.chunks).toString("utf8");
  }
}

/** Writes a chunk, waiting while the destination is full, so a slow reader throttles the reads. */
export async function writeWithBackpressure(out: NodeJS.WritableStream, chunk: Buffer): Promise<void> {
  if (chunk.length === 0) return;
  if (!out.write(chunk)) await once(out, "drain");
}

/**
 * Prints a phase's log as stored now (control characters made visible): page after page from offset 0 until the server says it
 * is complete or has no more bytes yet (the job still runs). Any failure part-way is a
 * `log_incomplete` error naming what was printed, so a truncated log never looks whole.
 */
export async function printPhaseLog(
  api: DroverClient,
  runId: string,
  phase: Phase,
  out: NodeJS.WritableStream,
): Promise<PhaseRead> {
  let offset = 0;
  const shown = new VisibleControls();
  for (;;) {
    let res;
    try {
      res = await api.exchange(routes.runLogs, {
        params: { id: runId },
        query: { phase, offset, limit: logPageBytes },
      });
    } catch (err) {
      // A refused first request (no such run, bad token) is about the request, not the log.
      if (offset === 0 && err instanceof DroverError && err.status < 500) throw err;
      const why = messageOf(err);
      throw new DroverError(
        "log_incomplete",
        `printed ${offset} bytes of the ${phase} log of run ${runId}, then the read failed: ${why}. Run \`drover run logs ${runId} --phase ${phase}\` again.`,
        { cause: err },
      );
    }
    const next = Number(res.headers[logHeaders.nextOffset]);
    const complete = res.headers[logHeaders.complete] === "true";
    if (!Number.isSafeInteger(next) || next !== offset + res.result.length) {
      throw new DroverError(
        "log_incomplete",
        `printed ${offset} bytes of the ${phase} log of run ${runId}, then the server answered an inconsistent offset (${String(res.headers[logHeaders.nextOffset])} after ${res.result.length} bytes from ${offset}). Run the command again; report it if it persists.`,
      );
    }
    await writeWithBackpressure(out, shown.push(res.result));
    offset = next;
    if (complete || res.result.length === 0) {
      await writeWithBackpressure(out, shown.end());
      return { bytes: offset, complete };
    }
  }
}
