/*
 * The text of a run's log as it streams in, kept as an array of lines so the viewer can read any
 * line in constant time and an append costs only the size of the chunk: a 200,000-line log is
 * never re-split or re-joined while it grows.
 *
 * Lines are split on "\n" only and stored exactly as they arrived, "\r" included, so that text()
 * gives back the log byte for byte and a "\r\n" split across two chunks needs no special case
 * (the "\r" ends one chunk's partial line, the "\n" then completes it). line() drops the "\r" of
 * a "\r\n" ending; a "\r" inside a line (a progress meter) is left to parseAnsi.
 */

/** Accumulates decoded chunks of a log into lines. */
export class LogBuffer {
  #lines: string[] = [];
  #partial = "";
  #version = 0;
  #generation = 0;

  /** Adds a chunk of decoded text; chunks may split lines (and "\r\n") anywhere. */
  append(chunk: string): void {
    this.#version++;
    if (chunk === "") return;
    let start = 0;
    let nl = chunk.indexOf("\n");
    if (nl === -1) {
      this.#partial += chunk;
      return;
    }
    this.#lines.push(this.#partial + chunk.slice(0, nl));
    start = nl + 1;
    // A loop rather than push(...split()): spreading a chunk of many short lines could overflow
    // the stack's argument limit.
    while ((nl = chunk.indexOf("\n", start)) !== -1) {
      this.#lines.push(chunk.slice(start, nl));
      start = nl + 1;
    }
    this.#partial = chunk.slice(start);
  }

  /** The number of lines, counting a last line that has no newline yet. */
  get lineCount(): number {
    return this.#lines.length + (this.#partial === "" ? 0 : 1);
  }

  /** Line i (0-based) without its line ending, or "" when out of range. */
  line(i: number): string {
    const raw = i === this.#lines.length ? this.#partial : (this.#lines[i] ?? "");
    return raw.endsWith("\r") ? raw.slice(0, -1) : raw;
  }

  /** The whole log exactly as it was appended, for download. */
  text(): string {
    if (this.#lines.length === 0) return this.#partial;
    return this.#lines.join("\n") + "\n" + this.#partial;
  }

  /** Increments on every append and clear, so a view knows to render again. */
  get version(): number {
    return this.#version;
  }

  /** Increments on every clear, so a view can drop what it derived from the old lines. */
  get generation(): number {
    return this.#generation;
  }

  /** Empties the buffer. */
  clear(): void {
    this.#lines = [];
    this.#partial = "";
    this.#version++;
    this.#generation++;
  }
}
