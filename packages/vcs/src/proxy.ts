import { EnvHttpProxyAgent, fetch as undiciFetch, type Dispatcher } from "undici";

/*
 * The VCS API clients' way out. Octokit and gitbeaker call the global fetch, which ignores
 * HTTP_PROXY, HTTPS_PROXY and NO_PROXY; a server or VCS agent that reaches github.com through
 * its network's proxy would fail to connect. Both clients are given this one dispatcher, which
 * reads those variables as git (run with the same environment) does.
 */

let shared: EnvHttpProxyAgent | undefined;

/** The dispatcher of every VCS API call: the proxy the environment names, with keep-alive connections. */
export function vcsDispatcher(): Dispatcher {
  // Made at first use, so the environment of the process as started is the one read. An http://
  // host is asked for in absolute form, as git and curl ask: many proxies tunnel only to 443.
  return (shared ??= new EnvHttpProxyAgent({ proxyTunnel: false }));
}

/** fetch through vcsDispatcher(), for Octokit's `request.fetch`. */
export const vcsFetch = ((input: Parameters<typeof undiciFetch>[0], init?: Parameters<typeof undiciFetch>[1]) =>
  undiciFetch(input, { ...init, dispatcher: vcsDispatcher() })) as unknown as typeof fetch;
