import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cacheDispatcher, createLogger, ProviderCache } from "@drover/agent";

// A registry address that takes the TCP connection and then never speaks (a black hole behind a
// load balancer, a stuck proxy): the caches' client must give up after the agent's connect
// deadline, as the agent's own client does, not after undici's default of 10 s.

const logger = createLogger("json", false);
logger.level = "silent";
const held: Socket[] = [];
const silent = createServer((socket) => void held.push(socket));
let root: string;

before(async () => {
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  root = mkdtempSync(join(tmpdir(), "drover-cache-dispatcher-"));
});
after(() => {
  for (const s of held) s.destroy();
  silent.close();
  rmSync(root, { recursive: true, force: true });
});

test("a provider download from an address that never answers the handshake fails after the connect deadline", async () => {
  const connectMs = 300;
  const cache = new ProviderCache({
    dir: join(root, "cache"),
    limitBytes: 1 << 30,
    dispatcher: cacheDispatcher(undefined, connectMs),
    logger,
    platform: "linux_amd64",
  });
  const dir = join(root, "config");
  mkdirSync(dir, { recursive: true });
  const port = (silent.address() as AddressInfo).port;
  writeFileSync(
    join(dir, "main.tf"),
    `terraform {\n  required_providers {\n    silent = { source = "127.0.0.1:${port}/drover/silent", version = "1.0.0" }\n  }\n}\n`,
  );
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  lease.release();
  assert.ok(held.length > 0, "the client never reached the silent address");
  assert.deepEqual(lease.prepared, []);
  // undici's connect-timeout error names the deadline it applied: the agent's, not undici's 10 s.
  assert.match(
    lease.notes.join("\n"),
    new RegExp(`silent 1\\.0\\.0 not cached .*Connect Timeout Error .*timeout: ${connectMs}ms`),
  );
});
