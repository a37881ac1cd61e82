import { Module, createRequire } from "node:module";
import type * as Http2 from "node:http2";
import type { Dispatcher, EnvHttpProxyAgent as EnvHttpProxyAgentClass } from "undici";

/*
 * undici, loaded file by file (decision 0031). Its index loads every part of it — fetch,
 * WebSocket, EventSource, the mock agents, the cache stores, HTTP/2 and SOCKS clients — about
 * 110 modules and 6 MB of an idle agent's memory, of which the agent and the CLI use two: the
 * proxy-aware agent and the promise-returning `request`. Both come from the same files the
 * index itself loads, so a dispatcher made from `undici`'s index (a test's Agent) is the same
 * class and works here too. undici has no `exports` map, so these paths are public to Node's
 * resolver; the version is pinned (`~7.30`), and the agent's proxy test (test/agent/proxy-dispatcher) calls both.
 */
const load = createRequire(import.meta.url);

/*
 * undici's index also gives every dispatcher its promise API (`request`, `connect`, `stream`,
 * `pipeline`, `upgrade`) by assigning lib/api onto Dispatcher's prototype. ProxyAgent opens its
 * CONNECT tunnel with `client.connect(...)`, so without this step every request through
 * HTTP(S)_PROXY fails (`connect is not a function`). Same assignment as the index's, so loading
 * both (a test's Agent) is harmless.
 */
Object.assign(
  (load("undici/lib/dispatcher/dispatcher.js") as { prototype: object }).prototype,
  load("undici/lib/api/index.js") as object,
);

/*
 * undici's HTTP/2 client (client-h2.js, loaded by every Client) requires node:http2 when it
 * loads, for a few constants, though it opens an HTTP/2 session only for a dispatcher made with
 * `allowH2` whose server offers h2 — never Drover's. Node's http2 core costs an idle agent
 * ~1 MB (SPEC §8; decision 0037), so while undici's files load, node:http2 is this stand-in:
 * the constants client-h2 reads at load (test/agent/lazy-http2 compares them with Node's) and a
 * `connect` that loads the real module on first use.
 */
const http2Constants = {
  HTTP2_HEADER_AUTHORITY: ":authority",
  HTTP2_HEADER_METHOD: ":method",
  HTTP2_HEADER_PATH: ":path",
  HTTP2_HEADER_SCHEME: ":scheme",
  HTTP2_HEADER_CONTENT_LENGTH: "content-length",
  HTTP2_HEADER_EXPECT: "expect",
  HTTP2_HEADER_STATUS: ":status",
  HTTP2_HEADER_PROTOCOL: ":protocol",
  NGHTTP2_REFUSED_STREAM: 7,
  NGHTTP2_CANCEL: 8,
};

/** What undici's HTTP/2 client gets for node:http2: its constants, and Node's `connect` loaded on first call. */
export const lazyHttp2 = {
  constants: http2Constants,
  connect: ((...args: Parameters<typeof Http2.connect>) =>
    (load("node:http2") as typeof Http2).connect(...args)) as typeof Http2.connect,
};

/** Runs `fn` (which loads undici's files) with `require("node:http2")` answered by lazyHttp2. */
function withLazyHttp2<T>(fn: () => T): T {
  const proto = Module.prototype as { require(id: string): unknown };
  const original = proto.require;
  proto.require = function (this: unknown, id: string) {
    return id === "node:http2" ? lazyHttp2 : original.call(this, id);
  };
  try {
    return fn();
  } finally {
    proto.require = original;
  }
}

/** undici's EnvHttpProxyAgent: honours HTTP(S)_PROXY and NO_PROXY. */
export const EnvHttpProxyAgent = withLazyHttp2(
  () => load("undici/lib/dispatcher/env-http-proxy-agent.js") as typeof EnvHttpProxyAgentClass,
);

const requestOn = load("undici/lib/api/api-request.js") as (
  this: Dispatcher,
  options: Dispatcher.RequestOptions,
) => Promise<Dispatcher.ResponseData>;

/** Options of `request`: undici's, with the dispatcher required (there is no global one here). */
export type TransportRequestOptions = Omit<Dispatcher.RequestOptions, "origin" | "path" | "method"> & {
  method?: Dispatcher.HttpMethod;
  dispatcher: Dispatcher;
};

/** undici's `request(url, options)` on `options.dispatcher`: GET unless a method is given. */
export function request(url: string | URL, options: TransportRequestOptions): Promise<Dispatcher.ResponseData> {
  const { dispatcher, method, ...rest } = options;
  const at = typeof url === "string" ? new URL(url) : url;
  return requestOn.call(dispatcher, {
    ...rest,
    origin: at.origin,
    path: `${at.pathname}${at.search}`,
    method: method ?? "GET",
  });
}
