import assert from "node:assert/strict";
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { createGzip } from "node:zlib";
import { rawTarGz } from "../support/archives.js";
import { spawnDrover, type Proc } from "../support/processes.js";
import { routePath, routes, type Route } from "@drover/protocol";
import { client, routeCall, type RouteArgs } from "../support/typed-api.js";

// Issue 13, points 1 and 2: denial of service by anonymous bodies and by hostile archives,
// against a real `drover server` process whose memory is read from /proc.

const admin = "drv_u_load-admin.0123456789abcdef0123456789abcdef";
let proc: Proc;
let url: string;
let dataDir: string;

before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "drover-sec-load-"));
  proc = spawnDrover(["server", "--port", "0", "--data-dir", dataDir], {
    ...process.env,
    DROVER_ADMIN_TOKEN: admin,
    DROVER_LOG_LEVEL: "warn",
  });
  url = (await proc.waitFor(/listening on (http:\/\/\S+)/))[1] as string;
  await api(routes.createPool, { body: { name: "load" } });
  await api(routes.createWorkspace, { body: { name: "load-ws", pool: "load" } });
});
after(async () => {
  await proc?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function api<R extends Route>(route: R, ...[input]: RouteArgs<R>): Promise<unknown> {
  return (await routeCall(url, route, ...([{ token: admin, ...input }] as RouteArgs<R>))).body;
}

/** Peak resident memory of the server process (VmHWM), in MB. */
function peakRssMb(): number {
  const status = readFileSync(`/proc/${proc.child.pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? "0") / 1024;
}

/** Polls /healthz until stopped; returns the slowest answer in ms. */
function watchHealth(): { stop(): Promise<number> } {
  let slowest = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      await client(url).call(routes.healthz, {});
      slowest = Math.max(slowest, performance.now() - t0);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return slowest;
    },
  };
}

/** Streams `totalBytes` of zeros to `path` without a token; resolves with the status, or the socket error. */
function anonymousUpload(
  method: string,
  path: string,
  totalBytes: number,
  contentType: string,
): Promise<{ status?: number; error?: string; sent: number }> {
  return new Promise((resolve) => {
    const chunk = Buffer.alloc(1024 * 1024);
    let sent = 0;
    let finished = false;
    const req = request(url + path, {
      method,
      headers: { "content-type": contentType, "content-length": String(totalBytes) },
    });
    const finish = (r: { status?: number; error?: string }) => {
      if (finished) return;
      finished = true;
      req.destroy();
      resolve({ ...r, sent });
    };
    req.on("response", (res) => {
      res.resume();
      finish({ status: res.statusCode ?? 0 });
    });
    req.on("error", (err: NodeJS.ErrnoException) => finish({ error: err.code ?? err.message }));
    const pump = () => {
      while (!finished && sent < totalBytes) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once("drain", pump);
      }
      if (!finished) req.end();
    };
    pump();
  });
}

test("20 concurrent anonymous 100 MB uploads are refused unread: server RSS stays under 300 MB, /healthz keeps answering", async () => {
  const targets: Array<[string, string, string]> = [
    [
      routes.uploadConfiguration.method,
      routePath(routes.uploadConfiguration, { ws: "load-ws" }),
      routes.uploadConfiguration.body.contentType,
    ],
    [routes.writeState.method, routePath(routes.writeState, { ws: "load-ws" }), routes.writeState.body.contentType],
    [
      routes.uploadPlan.method,
      routePath(routes.uploadPlan, { id: "job-0000000000000000" }),
      routes.uploadPlan.body.contentType,
    ],
    [routes.register.method, routePath(routes.register, {}), "application/json"],
  ];
  const health = watchHealth();
  const results = await Promise.all(
    Array.from({ length: 20 }, (_, i) => {
      const [method, path, type] = targets[i % targets.length] as [string, string, string];
      return anonymousUpload(method, path, 100 * 1024 * 1024, type);
    }),
  );
  const slowest = await health.stop();
  const peak = peakRssMb();
  const sentMb = results.reduce((n, r) => n + r.sent, 0) / (1024 * 1024);
  console.log(
    `anonymous uploads: peak server RSS ${peak.toFixed(0)} MB, slowest /healthz ${slowest.toFixed(0)} ms, ${sentMb.toFixed(0)} MB written by the clients before the server hung up`,
  );
  for (const r of results)
    assert.ok(r.status === 401 || r.error === "ECONNRESET" || r.error === "EPIPE", JSON.stringify(r));
  // A client still writing may see the hang-up (a reset: its bytes arrive unread) before it reads the
  // 401; on a busy machine all 20 may. The reason is checked by a client that sends the headers of a
  // 100 MB upload and waits for the answer before sending any of the body.
  const [method, path, type] = targets[0] as [string, string, string];
  const waiting = await new Promise<number>((resolve, reject) => {
    const req = request(url + path, {
      method,
      headers: { "content-type": type, "content-length": String(100 * 1024 * 1024) },
    });
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
      req.destroy();
    });
    req.on("error", reject);
    req.setTimeout(30_000, () => req.destroy(new Error("no answer before the body was sent")));
    req.flushHeaders();
  });
  assert.equal(waiting, 401, "the refusals are 401s");
  assert.ok(peak < 300, `server peak RSS ${peak.toFixed(0)} MB`);
  // Loose on a shared machine; the figure is printed above.
  assert.ok(slowest < 2000, `slowest /healthz ${slowest.toFixed(0)} ms`);
});

/** A small tar.gz followed, inside the gzip stream, by `zeros` bytes of zeros after the end-of-archive marker. */
async function trailingZerosArchive(zeros: number): Promise<Buffer> {
  const tar = Buffer.from(rawTarGz([{ path: "main.tf", content: "" }]));
  const { gunzipSync } = await import("node:zlib");
  const plain = gunzipSync(tar);
  const gz = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gz.on("data", (d: Buffer) => out.push(d));
  const done = new Promise((r) => gz.on("end", r));
  gz.write(plain);
  const block = Buffer.alloc(4 * 1024 * 1024);
  for (let left = zeros; left > 0; left -= block.length) {
    if (!gz.write(left >= block.length ? block : block.subarray(0, left)))
      await new Promise((r) => gz.once("drain", r));
  }
  gz.end();
  await done;
  return Buffer.concat(out);
}

test("a 1 MB archive with 1 GiB of zeros after its end marker is refused at once, /healthz answering throughout", async () => {
  const archive = await trailingZerosArchive(1024 * 1024 * 1024);
  assert.ok(archive.length < 2 * 1024 * 1024, `archive is ${archive.length} bytes`);
  const health = watchHealth();
  const t0 = performance.now();
  const res = await routeCall(url, routes.uploadConfiguration, {
    token: admin,
    params: { ws: "load-ws" },
    body: archive,
  });
  const body = res.body as { error: string; message: string };
  const elapsed = performance.now() - t0;
  const slowest = await health.stop();
  console.log(
    `trailing-data archive (${archive.length} bytes): refused in ${elapsed.toFixed(0)} ms, slowest /healthz ${slowest.toFixed(0)} ms`,
  );
  assert.equal(res.status, 422, JSON.stringify(body));
  assert.equal(body.error, "invalid_archive");
  assert.match(body.message, /after its end-of-archive marker/);
  assert.ok(elapsed < 5000, `refused after ${elapsed.toFixed(0)} ms`);
  assert.ok(slowest < 1000, `slowest /healthz ${slowest.toFixed(0)} ms`);
});

test("non-zero data after the end marker is refused too, and a normal archive is accepted", async () => {
  const plain = (await import("node:zlib")).gunzipSync(rawTarGz([{ path: "main.tf", content: "" }]));
  const { gzipSync } = await import("node:zlib");
  const hidden = gzipSync(Buffer.concat([plain, Buffer.from("hidden payload after the marker")]));
  const post = (body: Buffer) =>
    routeCall(url, routes.uploadConfiguration, { token: admin, params: { ws: "load-ws" }, body: body });
  const refused = await post(hidden);
  assert.equal(refused.status, 422);
  assert.equal((await post(rawTarGz([{ path: "main.tf", content: "" }]))).status, 201);
});
