import { createRequire } from "node:module";
import type * as Tls from "node:tls";

/**
 * Node's bundled root CAs, read when first asked for. An ESM import of node:tls makes Node
 * compute them at import time (its ESM facade reads every export, and `rootCertificates` is a
 * getter): ~0.9 MB of an idle agent that has no private CA to add them to (decision 0037).
 */
export function rootCertificates(): readonly string[] {
  return (createRequire(import.meta.url)("node:tls") as typeof Tls).rootCertificates;
}
