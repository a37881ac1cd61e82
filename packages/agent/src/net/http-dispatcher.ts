import { rootCertificates } from "node:tls";
import { EnvHttpProxyAgent, type Dispatcher } from "undici";

/** What an agent process's outbound HTTP client is made of. */
export interface DispatcherOptions {
  /** PEM added to the default roots (DROVER_CA_CERT). */
  caCertPem?: string | undefined;
  /** TCP/TLS connect deadline, in ms. */
  connectMs: number;
  /** How long an answer's headers may take, in ms (undici's default when unset). */
  headersTimeoutMs?: number;
  /** How long the body may pause between chunks, in ms (undici's default when unset). */
  bodyTimeoutMs?: number;
}

/**
 * The one way an agent process builds an outbound HTTP client: HTTP(S)_PROXY / NO_PROXY
 * honoured, DROVER_CA_CERT trusted beside the default roots, and the agent's connect deadline
 * (an address that never answers fails after it, not after undici's own default).
 */
export function proxyDispatcher(o: DispatcherOptions): Dispatcher {
  const tls = { timeout: o.connectMs, ...(o.caCertPem ? { ca: [...rootCertificates, o.caCertPem] } : {}) };
  // Through a proxy undici ignores `connect`: it reaches the proxy with `proxyTls` and the
  // server inside the CONNECT tunnel with `requestTls`, so the CA and deadline go to all three.
  // An http:// server is asked for in absolute form, not tunnelled: many proxies tunnel only to 443.
  return new EnvHttpProxyAgent({
    proxyTunnel: false,
    connect: tls,
    proxyTls: tls,
    requestTls: tls,
    ...(o.headersTimeoutMs === undefined ? {} : { headersTimeout: o.headersTimeoutMs }),
    ...(o.bodyTimeoutMs === undefined ? {} : { bodyTimeout: o.bodyTimeoutMs }),
  });
}
