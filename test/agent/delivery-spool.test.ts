import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { DeliverySpool, type Delivery } from "@drover/agent/vcs";
import { pino } from "pino";

/*
 * The VCS agent's spool of webhook deliveries (the listener's e2e is in e2e/vcs-agents): oldest
 * first, kept while the server fails, dropped when the server refuses one for good or the file
 * cannot be read, and a full spool refuses new ones.
 */

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function spoolDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "drover-spool-"));
  dirs.push(dir);
  return dir;
}

const delivery = (id: string, size = 10): Delivery => ({
  connection: "gh",
  event: "push",
  deliveryId: id,
  body: Buffer.alloc(size, 0x61),
});

/** A forward that answers from `answers` in turn (undefined: taken), recording each id it was given. */
function server(answers: (Error | undefined)[]) {
  const seen: string[] = [];
  let told: () => void = () => undefined;
  return {
    seen,
    /** Resolves once `n` forwards have been tried. */
    tried: (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => (seen.length >= n ? resolve() : (told = check));
        check();
      }),
    forward: (d: Delivery) => {
      seen.push(d.deliveryId);
      const answer = answers.shift();
      told();
      return answer === undefined ? Promise.resolve() : Promise.reject(answer);
    },
  };
}

const log = pino({ level: "silent" });

test("kept deliveries go oldest first; one the server did not take is tried again, then removed", async () => {
  const dir = spoolDir();
  const s = server([new Error("connect ECONNREFUSED"), undefined, undefined]);
  const spool = new DeliverySpool({ dir, forward: s.forward, log, retry: { initialMs: 1, maxMs: 5 } });
  // Accepted before forwarding starts: both wait on disk.
  await spool.start();
  assert.equal(await spool.accept(delivery("one")), true);
  assert.equal(await spool.accept(delivery("two")), true);
  await s.tried(3);
  await spool.stop();
  assert.deepEqual(s.seen, ["one", "one", "two"]);
  assert.deepEqual(readdirSync(dir), []);
});

test("a delivery still being written (its dot name) is left alone until it is renamed", async () => {
  const dir = spoolDir();
  const s = server([undefined, undefined]);
  const spool = new DeliverySpool({ dir, forward: s.forward, log, retry: { initialMs: 1, maxMs: 5 } });
  await spool.start();
  // What accept() leaves between its write and its rename; its dot sorts before every digit.
  const writing = `.${"9".repeat(15)}-000000-0123456789abcdef.delivery.json`;
  writeFileSync(join(dir, writing), JSON.stringify({ ...delivery("half"), body: "" }));
  assert.equal(await spool.accept(delivery("whole")), true);
  await s.tried(1);
  await spool.stop();
  assert.deepEqual(s.seen, ["whole"]);
  assert.deepEqual(readdirSync(dir), [writing], "the file being written is its writer's");
});

test("a delivery the server refuses for good, and an unreadable file, are dropped; the rest goes on", async () => {
  const dir = spoolDir();
  writeFileSync(join(dir, "000000000000001-000000-broken.delivery.json"), "{not json");
  writeFileSync(join(dir, ".000000000000002-000000-half.delivery.json"), "{");
  const s = server([new DroverError("not_found", "no such connection in this pool"), undefined]);
  const spool = new DeliverySpool({ dir, forward: s.forward, log, retry: { initialMs: 1, maxMs: 5 } });
  await spool.start();
  await spool.accept(delivery("refused"));
  await spool.accept(delivery("taken"));
  await s.tried(2);
  await spool.stop();
  assert.deepEqual(s.seen, ["refused", "taken"]);
  assert.deepEqual(readdirSync(dir), []);
});

test("a full spool refuses a delivery; what it holds stays for the next start", async () => {
  const dir = spoolDir();
  const down = { forward: () => Promise.reject(new Error("connect ECONNREFUSED")) };
  const spool = new DeliverySpool({ dir, ...down, log, maxBytes: 300, retry: { initialMs: 60_000, maxMs: 60_000 } });
  await spool.start();
  assert.equal(await spool.accept(delivery("fits", 100)), true);
  assert.equal(await spool.accept(delivery("over", 100)), false);
  await spool.stop();
  assert.equal(readdirSync(dir).length, 1);
  const s = server([undefined]);
  const next = new DeliverySpool({ dir, forward: s.forward, log });
  await next.start();
  await s.tried(1);
  await next.stop();
  assert.deepEqual(s.seen, ["fits"]);
});
