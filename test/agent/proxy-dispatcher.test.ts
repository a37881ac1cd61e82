import assert from "node:assert/strict";
import { createServer as createHttpServer, request as httpRequest, type Server } from "node:http";
import { connect as tcpConnect, type AddressInfo, type Socket } from "node:net";
import { after, afterEach, before, test } from "node:test";
import { AgentClient, cacheDispatcher } from "@drover/agent";
import { transportRequest } from "@drover/runtime";
import { startPrivateTlsStateServer, type PrivateTlsStateServer } from "../support/private-ca.js";

// The agent's outbound clients (its own and the caches') through HTTP(S)_PROXY: a CONNECT tunnel
// to an HTTPS server of a private CA (DROVER_CA_CERT), a plain-http server through HTTP_PROXY
// by an absolute-form request (as curl and git ask), and NO_PROXY going direct.

/** A forward proxy on 127.0.0.1 that tunnels CONNECT only to TLS, forwards absolute-form requests, and counts both. */
interface CountingProxy {
  url: string;
  connects: string[];
  forwarded: string[];
  close(): void;
}

async function startProxy(): Promise<CountingProxy> {
  const connects: string[] = [];
  const forwarded: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createHttpServer((req, res) => {
    const target = new URL(req.url ?? "/", "http://absent.invalid");
    forwarded.push(target.host);
    const upstream = httpRequest(
      { host: target.hostname, port: target.port, method: req.method, path: target.pathname + target.search },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  server.on("connect", (req, client: Socket, head: Buffer) => {
    connects.push(req.url ?? "");
    const [host, port] = (req.url ?? "").split(":");
    // Only the TLS servers are tunnelled to, as a proxy that tunnels only to its TLS ports would.
    if (port !== new URL(tls.url).port) {
      client.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const upstream = tcpConnect(Number(port), host ?? "", () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    sockets.add(upstream);
    upstream.on("close", () => sockets.delete(upstream));
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connects,
    forwarded,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

let proxy: CountingProxy;
let tls: PrivateTlsStateServer;
let plain: Server;
let plainUrl: string;
const saved = { ...process.env };

before(async () => {
  proxy = await startProxy();
  tls = await startPrivateTlsStateServer("through the tunnel");
  plain = createHttpServer((_req, res) => res.end("plain"));
  await new Promise<void>((r) => plain.listen(0, "127.0.0.1", r));
  plainUrl = `http://127.0.0.1:${(plain.address() as AddressInfo).port}/`;
});
after(() => {
  proxy.close();
  tls.close();
  plain.close();
});
afterEach(() => {
  process.env = { ...saved };
  proxy.connects.length = 0;
  proxy.forwarded.length = 0;
});

/** Points the proxy variables at the counting proxy (undici prefers the lower-case ones, so those go). */
function useProxy(noProxy?: string): void {
  for (const k of ["http_proxy", "https_proxy", "no_proxy", "NO_PROXY"]) delete process.env[k];
  process.env.HTTP_PROXY = proxy.url;
  process.env.HTTPS_PROXY = proxy.url;
  if (noProxy !== undefined) process.env.NO_PROXY = noProxy;
}

test("the agent's client reaches an HTTPS server of a private CA through HTTPS_PROXY's CONNECT tunnel", async () => {
  useProxy();
  const client = new AgentClient("https://127.0.0.1:1", tls.caPem, { connectMs: 5_000 });
  const res = await transportRequest(tls.url, { dispatcher: client.dispatcher });
  assert.equal(res.statusCode, 200);
  assert.match(await res.body.text(), /through the tunnel/);
  assert.deepEqual(proxy.connects, [new URL(tls.url).host]);
});

test("the caches' client reaches an HTTPS server of a private CA through HTTPS_PROXY", async () => {
  useProxy();
  const res = await transportRequest(tls.url, { dispatcher: cacheDispatcher(tls.caPem, 5_000) });
  assert.equal(res.statusCode, 200);
  assert.match(await res.body.text(), /through the tunnel/);
  assert.deepEqual(proxy.connects, [new URL(tls.url).host]);
});

test("a plain-http server is reached through HTTP_PROXY by an absolute-form request, not a tunnel", async () => {
  useProxy();
  const res = await transportRequest(plainUrl, { dispatcher: cacheDispatcher(undefined, 5_000) });
  assert.equal(await res.body.text(), "plain");
  const agent = new AgentClient(plainUrl, undefined, { connectMs: 5_000 });
  assert.equal(await (await transportRequest(plainUrl, { dispatcher: agent.dispatcher })).body.text(), "plain");
  assert.deepEqual(proxy.forwarded, [new URL(plainUrl).host, new URL(plainUrl).host]);
  assert.deepEqual(proxy.connects, []);
});

test("NO_PROXY sends a matching host direct, past the proxy", async () => {
  useProxy("127.0.0.1");
  const dispatcher = cacheDispatcher(tls.caPem, 5_000);
  assert.match(await (await transportRequest(tls.url, { dispatcher })).body.text(), /through the tunnel/);
  assert.equal(await (await transportRequest(plainUrl, { dispatcher })).body.text(), "plain");
  assert.deepEqual(proxy.connects, []);
  assert.deepEqual(proxy.forwarded, []);
});
