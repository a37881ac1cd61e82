/**
 * Decodes the Docker Engine API's multiplexed stream (logs and attach of a container without a
 * TTY): frames of an 8-byte header — stream type (1 stdout, 2 stderr; 0 stdin), three zero
 * bytes, the payload length as a big-endian uint32 — then the payload. Chunks may split a
 * header or a payload anywhere; frames come out whole and in order.
 */
export class StreamDemuxer {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly onFrame: (stream: "stdout" | "stderr", data: Buffer) => void) {}

  push(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) return;
      const kind = this.pending[0];
      const data = this.pending.subarray(8, 8 + size);
      this.pending = this.pending.subarray(8 + size);
      this.onFrame(kind === 2 ? "stderr" : "stdout", data);
    }
  }

  /** Bytes of an unfinished frame left over (a stream cut mid-frame). */
  get leftover(): number {
    return this.pending.length;
  }
}
