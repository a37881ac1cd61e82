import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, isMetadataAddress, ModuleCache } from "@drover/agent";
import { rawTarGz } from "../support/archives.js";

// Security review N14: what a configuration names (a module source, and where it redirects) is
// fetched by the agent, never from a link-local or cloud metadata address unless the operator
// allows it (DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES).

const logger = createLogger("json", false);
logger.level = "silent";
const archive = rawTarGz([{ path: "main.tf", content: 'output "v" { value = "from-metadata" }\n' }]);
let root: string;
let server: Server;
let port = 0;
/** Requests the server got, by the Host header they carried. */
const seen: string[] = [];

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-fetch-guard-"));
  // One server plays both the configuration's source on 127.0.0.1 and the metadata service.
  server = createServer((req, res) => {
    seen.push(`${req.headers.host ?? ""}${req.url ?? ""}`);
    if (req.url === "/mod.tar.gz" && req.headers.host?.startsWith("127.0.0.1")) {
      res.writeHead(302, { location: `http://169.254.169.254:${port}/latest/mod.tar.gz` }).end();
    } else if (req.url === "/latest/mod.tar.gz")
      res.writeHead(200, { "content-type": "application/gzip" }).end(archive);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  port = typeof address === "object" && address ? address.port : 0;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(root, { recursive: true, force: true });
});

/** A client whose every connection reaches the test server, whatever address it was meant for. */
const everythingHere = () =>
  new UndiciAgent({
    connect: (_options, callback) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => callback(null, socket));
      socket.once("error", (err) => callback(err, null));
    },
  });

let n = 0;
function configDir(): string {
  const dir = join(root, `c${n++}`);
  mkdirSync(dir);
  writeFileSync(join(dir, "main.tf"), `module "m" {\n  source = "http://127.0.0.1:${port}/mod.tar.gz"\n}\n`);
  return dir;
}

test("link-local and metadata addresses are told apart from loopback and private ones", () => {
  for (const a of [
    "169.254.169.254",
    "169.254.170.2",
    "100.100.100.200",
    "168.63.129.16",
    "fe80::1",
    "fd00:ec2::254",
    "fd20:ce::254",
    "::ffff:169.254.169.254",
    "::ffff:a9fe:a9fe",
    "[fd00:ec2::254]",
  ]) {
    assert.equal(isMetadataAddress(a), true, a);
  }
  for (const a of [
    "127.0.0.1",
    "::1",
    "10.0.0.1",
    "192.168.1.1",
    "100.100.100.201",
    "fd00:ec2::253",
    "8.8.8.8",
    "::ffff:127.0.0.1",
    "registry.example.com",
  ]) {
    assert.equal(isMetadataAddress(a), false, a);
  }
});

test("a module source on 127.0.0.1 that redirects to the metadata address fails the run, and nothing is asked of it", async () => {
  const cache = new ModuleCache({ dir: join(root, "off"), limitBytes: 1 << 30, dispatcher: everythingHere(), logger });
  seen.length = 0;
  await assert.rejects(cache.prepare(configDir(), AbortSignal.timeout(30_000)), (err: Error & { code?: string }) => {
    assert.equal(err.code, "fetch_refused", err.message);
    assert.match(
      err.message,
      /refused to fetch http:\/\/169\.254\.169\.254:\d+\/latest\/mod\.tar\.gz: its host is 169\.254\.169\.254, a link-local or cloud metadata address/,
    );
    assert.match(err.message, /DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES/);
    return true;
  });
  assert.deepEqual(seen, [`127.0.0.1:${port}/mod.tar.gz`], "only the source itself was asked");
});

test("DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES lets the redirect be followed", async () => {
  const cache = new ModuleCache({
    dir: join(root, "on"),
    limitBytes: 1 << 30,
    dispatcher: everythingHere(),
    logger,
    allowMetadataAddresses: true,
  });
  seen.length = 0;
  const lease = await cache.prepare(configDir(), AbortSignal.timeout(30_000));
  lease.release();
  assert.equal(lease.installed.length, 1, lease.notes.join("\n"));
  assert.deepEqual(seen, [`127.0.0.1:${port}/mod.tar.gz`, `169.254.169.254:${port}/latest/mod.tar.gz`]);
});
