import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { constants, createServer, type Http2Server } from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { lazyHttp2 } from "@drover/protocol";

// protocol/transport.ts loads undici with a stand-in for node:http2 (decision 0037): these tests
// fail when the stand-in's constants drift from Node's, when its `connect` does not reach an
// HTTP/2 server, or when loading the protocol package loads Node's http2 again.

test("the node:http2 stand-in holds Node's values of the constants undici's HTTP/2 client reads", () => {
  for (const [name, value] of Object.entries(lazyHttp2.constants)) {
    assert.equal(value, (constants as Record<string, unknown>)[name], name);
  }
});

test("the stand-in's connect is Node's: it opens an HTTP/2 session and gets an answer", async () => {
  const server: Http2Server = createServer((req, res) => res.end(`h2 ${req.url}`));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const session = lazyHttp2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  try {
    const body = await new Promise<string>((resolve, reject) => {
      const stream = session.request({ ":path": "/ping" });
      let text = "";
      stream
        .setEncoding("utf8")
        .on("data", (d: string) => (text += d))
        .on("end", () => resolve(text))
        .on("error", reject);
    });
    assert.equal(body, "h2 /ping");
  } finally {
    session.close();
    await new Promise((resolve) => server.close(resolve));
  }
});

test("loading the protocol package (undici's proxy agent and request) does not load Node's http2", () => {
  const out = spawnSync(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      'await import("@drover/protocol"); console.log(JSON.stringify(process.moduleLoadList.filter((m) => m.includes("http2"))))',
    ],
    { cwd: process.cwd(), encoding: "utf8" },
  );
  assert.equal(out.status, 0, out.stderr);
  assert.deepEqual(JSON.parse(out.stdout), []);
});
