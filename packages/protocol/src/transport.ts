import { createRequire } from "node:module";
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
Object.assign((load("undici/lib/dispatcher/dispatcher.js") as { prototype: object }).prototype, load("undici/lib/api/index.js") as object);

/** undici's EnvHttpProxyAgent: honours HTTP(S)_PROXY and NO_PROXY. */
export const EnvHttpProxyAgent = load("undici/lib/dispatcher/env-http-proxy-agent.js") as typeof EnvHttpProxyAgentClass;

const requestOn = load("undici/lib/api/api-request.js") as (this: Dispatcher, options: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>;

/** Options of `request`: undici's, with the dispatcher required (there is no global one here). */
export type TransportRequestOptions = Omit<Dispatcher.RequestOptions, "origin" | "path" | "method"> & { method?: Dispatcher.HttpMethod; dispatcher: Dispatcher };

/** undici's `request(url, options)` on `options.dispatcher`: GET unless a method is given. */
export function request(url: string | URL, options: TransportRequestOptions): Promise<Dispatcher.ResponseData> {
  const { dispatcher, method, ...rest } = options;
  const at = typeof url === "string" ? new URL(url) : url;
  return requestOn.call(dispatcher, { ...rest, origin: at.origin, path: `${at.pathname}${at.search}`, method: method ?? "GET" });
}
