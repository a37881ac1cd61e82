import assert from "node:assert/strict";
import { test } from "node:test";
import { DroverError } from "@drover/protocol";
import { LogStream, type JobClient } from "@drover/agent";

// LogStream's queue of output waiting for the server, against an in-memory stand-in for the
// server's append rules: thousands of small pipe reads queued behind slow appends leave in
// order, once; and bytes the server says it lost are marked in the log, in front of the rest.

/** A server log in memory: stores contiguous bytes, refuses gaps like the real one. */
function memoryServer(opts: { loseAfterFirst?: number } = {}) {
  let stored = Buffer.alloc(0);
  let appends = 0;
  let release: () => void = () => undefined;
  let gate = new Promise<void>((r) => (release = r));
  const job = {
    async appendLog(offset: number, data: Buffer): Promise<number> {
      await gate;
      appends++;
      if (opts.loseAfterFirst !== undefined && appends === 2) stored = stored.subarray(0, opts.loseAfterFirst);
      if (offset > stored.length)
        throw new DroverError("log_gap", "gap", { details: { expectedOffset: stored.length } });
      const fresh = data.subarray(Math.min(data.length, stored.length - offset));
      stored = Buffer.concat([stored, fresh]);
      return stored.length;
    },
  } as unknown as JobClient;
  return {
    job,
    stored: () => stored,
    open: () => release(),
    hold: () => (gate = new Promise<void>((r) => (release = r))),
  };
}

test("thousands of small writes queued behind held appends reach the server whole, in order, once", async () => {
  const server = memoryServer();
  const log = new LogStream(server.job);
  let expected = "";
  // The first appends are held: everything below queues up in many small pieces.
  // ~3 MiB in 200,000 pieces: more than two appends' worth, so the queue's front moves a lot.
  for (let i = 0; i < 200_000; i++) {
    const line = `line ${String(i).padStart(8, "0")}\n`;
    expected += line;
    log.write(line);
  }
  server.open();
  await log.close();
  assert.equal(server.stored().toString(), expected);
  assert.equal(log.acknowledged, Buffer.byteLength(expected));
  assert.equal(log.unsent, 0);
});

test("bytes the server lost are marked in the log before what follows, and close() reports them", async () => {
  const server = memoryServer({ loseAfterFirst: 4 });
  server.open();
  const log = new LogStream(server.job);
  log.write("aaaa\nbbbb\n");
  // Acknowledged through offset 10; then the server forgets everything after byte 4.
  while (log.acknowledged < 10) await new Promise((r) => setImmediate(r));
  for (let i = 0; i < 3000; i++) log.write(`c${i}\n`);
  await assert.rejects(log.close(), /the server lost log bytes 4\.\.10/);
  const text = server.stored().toString();
  assert.match(text, /^aaaa\n\[drover\] the server lost log bytes 4\.\.10 of this job\nc0\nc1\n/);
  assert.ok(text.endsWith("c2999\n"), "everything after the marker arrived");
});
