// A private certificate authority and an HTTPS server whose certificate it is, for tests of
// the values that make runs trust a private CA (task.caBundle).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** An HTTPS server on 127.0.0.1 serving a terraform state whose output `greeting` is `greeting`. */
export interface PrivateTlsStateServer {
  /** The state's URL, for terraform's http backend. */
  url: string;
  /** PEM of the CA (self-signed: the server's certificate is its own root). */
  caPem: string;
  close(): void;
}

/** A self-signed CA certificate for 127.0.0.1, made with the openssl CLI. */
export function privateCa(): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), "private-ca-"));
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
        "2",
        "-subj",
        "/CN=drover-test-private-ca",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyCertSign",
        "-keyout",
        join(dir, "key.pem"),
        "-out",
        join(dir, "cert.pem"),
      ],
      { encoding: "utf8" },
    );
    assert.equal(r.status, 0, r.stderr);
    return { cert: readFileSync(join(dir, "cert.pem"), "utf8"), key: readFileSync(join(dir, "key.pem"), "utf8") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function startPrivateTlsStateServer(greeting: string): Promise<PrivateTlsStateServer> {
  const ca = privateCa();
  const state = JSON.stringify({
    version: 4,
    terraform_version: "1.5.0",
    serial: 1,
    lineage: "private-ca",
    outputs: { greeting: { value: greeting, type: "string" } },
    resources: [],
  });
  const server: Server = createServer({ cert: ca.cert, key: ca.key }, (_req, res) => {
    res.setHeader("content-type", "application/json");
    res.end(state);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  assert.ok(addr && typeof addr === "object");
  return { url: `https://127.0.0.1:${addr.port}/state.json`, caPem: ca.cert, close: () => server.close() };
}

/** A configuration that reads the state at `url` over the http backend and outputs its greeting. */
export function remoteStateConfig(url: string): Record<string, string> {
  return {
    "main.tf": `data "terraform_remote_state" "ca" {\n  backend = "http"\n  config = {\n    address = "${url}"\n  }\n}\n\noutput "greeting" {\n  value = data.terraform_remote_state.ca.outputs.greeting\n}\n`,
  };
}
