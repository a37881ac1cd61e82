/**
 * A self-signed serving certificate for 127.0.0.1, made once per process with the
 * openssl CLI (Node cannot issue X.509 certificates). kubectl only sends bearer
 * tokens over TLS, so HTTPS is the default whenever openssl is available.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface ServingCert {
  cert: string;
  key: string;
}

let cached: ServingCert | undefined;

export function servingCert(): ServingCert | undefined {
  if (cached) return cached;
  const dir = mkdtempSync(join(tmpdir(), "ktc-tls-"));
  try {
    const r = spawnSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "30",
        "-subj",
        "/CN=kube-test-cluster",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyCertSign",
        "-addext",
        "extendedKeyUsage=serverAuth",
        "-keyout",
        join(dir, "key.pem"),
        "-out",
        join(dir, "cert.pem"),
      ],
      { stdio: "ignore", timeout: 20_000 },
    );
    if (r.status !== 0) return undefined;
    cached = { cert: readFileSync(join(dir, "cert.pem"), "utf8"), key: readFileSync(join(dir, "key.pem"), "utf8") };
    return cached;
  } catch {
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
