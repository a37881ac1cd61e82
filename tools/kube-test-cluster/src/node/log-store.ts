/** Container output kept per pod uid, container and restart, served by pods/log. */
import type { LogOptions } from "../api/http-server.js";

interface Chunk {
  time: number;
  data: Buffer;
}

export class ContainerLog {
  readonly chunks: Chunk[] = [];
  closed = false;
  private readonly listeners = new Set<() => void>();

  append(data: Buffer): void {
    this.chunks.push({ time: Date.now(), data });
    this.notify();
  }

  close(): void {
    this.closed = true;
    this.notify();
  }

  text(): string {
    return Buffer.concat(this.chunks.map((c) => c.data)).toString("utf8");
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** Resolves when something is appended or the log closes. */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.listeners.delete(done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      this.listeners.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

function stamp(time: number): string {
  return new Date(time).toISOString().replace(/\.(\d{3})Z$/, ".$1000000Z");
}

/** Splits chunks into lines (keeping the newline), each with the time of the chunk it ended in. */
function lines(chunks: Chunk[]): { time: number; text: string }[] {
  const out: { time: number; text: string }[] = [];
  let cur = "";
  let start = 0;
  for (const c of chunks) {
    const s = c.data.toString("utf8");
    for (const part of s.split(/(?<=\n)/)) {
      if (cur === "") start = c.time;
      cur += part;
      if (cur.endsWith("\n")) {
        out.push({ time: start, text: cur });
        cur = "";
      }
    }
  }
  if (cur !== "") out.push({ time: start, text: cur });
  return out;
}

export async function streamContainerLog(
  log: ContainerLog,
  opts: LogOptions,
  write: (chunk: Buffer) => boolean,
  signal: AbortSignal,
): Promise<void> {
  let budget = opts.limitBytes ?? Infinity;
  const emit = (text: string): boolean => {
    if (budget <= 0) return false;
    let buf = Buffer.from(text, "utf8");
    if (buf.length > budget) buf = buf.subarray(0, budget);
    budget -= buf.length;
    write(buf);
    return budget > 0;
  };
  let consumed = log.chunks.length;
  let initial = lines(log.chunks.slice(0, consumed));
  if (opts.sinceSeconds !== undefined) {
    const since = Date.now() - opts.sinceSeconds * 1000;
    initial = initial.filter((l) => l.time >= since);
  }
  if (opts.tailLines !== undefined) initial = opts.tailLines <= 0 ? [] : initial.slice(-opts.tailLines);
  for (const l of initial) if (!emit(opts.timestamps ? `${stamp(l.time)} ${l.text}` : l.text)) return;
  if (!opts.follow) return;
  let atLineStart = initial.length === 0 || (initial[initial.length - 1]?.text.endsWith("\n") ?? true);
  while (!signal.aborted) {
    while (consumed < log.chunks.length) {
      const c = log.chunks[consumed++];
      if (!c) continue;
      let text = c.data.toString("utf8");
      if (opts.timestamps) {
        text = text
          .split(/(?<=\n)/)
          .map((part) => {
            const out = atLineStart ? `${stamp(c.time)} ${part}` : part;
            atLineStart = part.endsWith("\n");
            return out;
          })
          .join("");
      }
      if (!emit(text)) return;
    }
    if (log.closed) return;
    await log.changed(signal);
  }
}
