import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "node:http";
import { gunzipSync } from "node:zlib";
import { after, before, test } from "node:test";
import Fastify from "fastify";
import { contentSecurityPolicy, registerWebUi } from "@drover/server";
import { startTestServer, type TestServer } from "../support/server.js";
import { rawCall } from "../support/typed-api.js";

/*
 * The server serves the built web UI beside the API: the page for every /app path with a CSP
 * that forbids inline script, hashed assets cached for good, nothing else from the disk.
 */

let server: TestServer;
before(async () => {
  server = await startTestServer();
});
after(() => server?.stop());

// These paths are the UI's, outside the route table (server/http/web-ui.ts).
const get = (path: string, headers: Record<string, string> = {}) =>
  rawCall(server.url, "GET", path, undefined, undefined, headers);

test("/ leads to the UI, and every /app path answers the page with a strict CSP", async () => {
  const root = await get("/");
  assert.equal(root.status, 302);
  assert.equal(root.headers.get("location"), "/app/");
  for (const path of ["/app", "/app/", "/app/workspaces/a%20b/runs/run-1", "/app/no/such/page"]) {
    const res = await get(path);
    assert.equal(res.status, 200, path);
    assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
    assert.equal(res.headers.get("content-security-policy"), contentSecurityPolicy);
    assert.equal(res.headers.get("cache-control"), "no-cache", "a new release shows at the next load");
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    assert.equal(res.headers.get("x-frame-options"), "DENY");
  }
  assert.match(contentSecurityPolicy, /script-src 'self'(;|$)/);
  assert.doesNotMatch(contentSecurityPolicy, /unsafe-inline|unsafe-eval|https?:/);
});

test("the page loads its code from hashed files only, cached for good and sent compressed", async () => {
  const page = String((await get("/app")).body);
  const scripts = [...page.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/g)];
  assert.ok(scripts.length >= 1);
  for (const [tag, body] of scripts) {
    assert.match(tag, /src="\/assets\/[^"]+-[A-Za-z0-9_-]{8}\.js"/, "a hashed file");
    assert.equal(body?.trim(), "", "no inline script");
  }
  const assets = [...page.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1] ?? "");
  assert.ok(assets.some((a) => a.endsWith(".css")));
  for (const asset of assets) {
    const res = await get(asset);
    assert.equal(res.status, 200, asset);
    assert.equal(res.headers.get("cache-control"), "public, max-age=31536000, immutable");
  }
  const script = assets.find((a) => a.endsWith(".js")) ?? "";
  // eslint-disable-next-line no-restricted-globals -- the raw bytes: the typed client decodes them
  const zipped = await fetch(`${server.url}${script}`, { headers: { "accept-encoding": "gzip" } });
  assert.equal(zipped.headers.get("content-encoding"), "gzip");
  assert.match(zipped.headers.get("content-type") ?? "", /^text\/javascript/);
});

test("nothing outside the build is served", async () => {
  for (const path of ["/assets/nope.js", "/assets/../package.json", "/assets/%2e%2e/package.json", "/assets/"]) {
    const res = await get(path);
    assert.equal(res.status, 404, path);
  }
});

test("without a build, /app says how to make one and the API still works", async () => {
  const empty = mkdtempSync(join(tmpdir(), "drover-no-ui-"));
  const app = Fastify();
  registerWebUi(app, empty);
  try {
    const res = await app.inject({ method: "GET", url: "/app/workspaces" });
    assert.equal(res.statusCode, 503);
    assert.match(res.body, /npm run build/);
  } finally {
    await app.close();
    rmSync(empty, { recursive: true, force: true });
  }
});

/** The bytes of `path` as sent, asking for `encoding` (node:http does not decompress). */
function bytesOf(path: string, encoding: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const req = request(`${server.url}${path}`, { headers: { "accept-encoding": encoding } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve(Buffer.concat(chunks)));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

test("the gzip answer is the same file", async () => {
  const page = String((await get("/app")).body);
  const script = /src="(\/assets\/[^"]+\.js)"/.exec(page)?.[1] ?? "";
  const plain = await bytesOf(script, "identity");
  assert.ok(plain.length > 1000);
  assert.deepEqual(gunzipSync(await bytesOf(script, "gzip")), plain);
});
