import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/*
 * A provider registry on 127.0.0.1 over TLS (terraform talks to registries over https only),
 * serving providers packaged as terraform expects: flat zips, SHA256SUMS, a detached binary
 * signature by a throwaway GnuPG key. The providers are test-provider.ts behind a launcher, so
 * terraform can run them. It counts what it serves, and can be told to lie.
 */

const providerScript = join(dirname(fileURLToPath(import.meta.url)), "test-provider.js");

export interface RegistryProvider {
  type: string;
  versions: string[];
  /** Random bytes added to each package (a file beside the launcher), to give it a size. */
  padBytes?: number;
}

/** A registry module `drover/<name>/null` served as a .tar.gz of `files`. */
export interface RegistryModule {
  name: string;
  versions: string[];
  files: Record<string, string>;
}

export interface TestRegistry {
  /** `127.0.0.1:PORT`, a provider source host. */
  host: string;
  /** The registry's certificate: SSL_CERT_FILE for terraform, DROVER_CA_CERT for the agent. */
  caFile: string;
  /** Archive downloads by file name. */
  downloads: Map<string, number>;
  /** Every request path, in order. */
  requests: string[];
  /** Lies the registry tells from now on. */
  tamper: { shasum?: boolean; signature?: boolean; archive?: boolean };
  source(type: string): string;
  /** terraform's h1: hash of a package, computed here independently of the agent. */
  h1(type: string, version: string): string;
  /** zh: hash (sha256 of the archive). */
  zh(type: string, version: string): string;
  archiveName(type: string, version: string): string;
  close(): Promise<void>;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env, input?: Buffer): Buffer {
  return execFileSync(cmd, args, { env, input, stdio: ["pipe", "pipe", "pipe"] });
}

/** A self-signed certificate for 127.0.0.1 and localhost (also fit for go-plugin's mutual TLS). */
export function selfSignedCert(dir: string, name: string): { cert: string; key: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  run("openssl", [
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    key,
    "-out",
    cert,
    "-days",
    "3650",
    "-subj",
    "/CN=localhost",
    "-addext",
    "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=digitalSignature,keyCertSign",
    "-addext",
    "extendedKeyUsage=serverAuth,clientAuth",
  ]);
  chmodSync(key, 0o644);
  return { cert, key };
}

function packageHash(dir: string): string {
  const lines = readdirSync(dir)
    .sort()
    .map(
      (n) =>
        `${createHash("sha256")
          .update(readFileSync(join(dir, n)))
          .digest("hex")}  ${n}\n`,
    )
    .join("");
  return `h1:${createHash("sha256").update(lines).digest("base64")}`;
}

export async function startProviderRegistry(
  providers: RegistryProvider[],
  modules: RegistryModule[] = [],
): Promise<TestRegistry> {
  const dir = mkdtempSync(join(tmpdir(), "drover-registry-"));
  // Runs may be another user: the launchers and the provider's certificate must be readable.
  chmodSync(dir, 0o755);
  const tls = selfSignedCert(dir, "registry");
  const pluginTls = selfSignedCert(dir, "plugin");
  const gnupg = mkdtempSync(join(tmpdir(), "gpg-"));
  const gpgEnv = { ...process.env, GNUPGHOME: gnupg };
  run(
    "gpg",
    [
      "--batch",
      "--passphrase",
      "",
      "--quick-gen-key",
      "Drover Test Registry <registry@drover.dev>",
      "rsa2048",
      "sign",
      "never",
    ],
    gpgEnv,
  );
  const armoredKey = run("gpg", ["--batch", "--armor", "--export"], gpgEnv).toString("utf8");
  const keyId =
    /^pub:[^:]*:[^:]*:[^:]*:([0-9A-F]{16})/m.exec(
      run("gpg", ["--batch", "--with-colons", "--list-keys"], gpgEnv).toString("utf8"),
    )?.[1] ?? "";

  const files = new Map<string, Buffer>();
  const hashes = new Map<string, { h1: string; zh: string; archive: string }>();
  for (const p of providers) {
    for (const v of p.versions) {
      const pkg = join(dir, "pkg", `${p.type}_${v}`);
      mkdirSync(pkg, { recursive: true });
      const launcher = join(pkg, `terraform-provider-${p.type}_v${v}`);
      writeFileSync(
        launcher,
        `#!/bin/sh\nexec "${process.execPath}" "${providerScript}" ${p.type} "${pluginTls.cert}" "${pluginTls.key}"\n`,
        { mode: 0o755 },
      );
      if (p.padBytes) writeFileSync(join(pkg, "pad.bin"), randomBytes(p.padBytes));
      const archive = `terraform-provider-${p.type}_${v}_linux_amd64.zip`;
      const zipPath = join(dir, archive);
      run("zip", ["-X", "-j", "-q", zipPath, ...readdirSync(pkg).map((n) => join(pkg, n))]);
      const zip = readFileSync(zipPath);
      files.set(archive, zip);
      const zh = createHash("sha256").update(zip).digest("hex");
      hashes.set(`${p.type}/${v}`, { h1: packageHash(pkg), zh: `zh:${zh}`, archive });
      const sums = Buffer.from(`${zh}  ${archive}\n`);
      files.set(`${p.type}_${v}_SHA256SUMS`, sums);
      const sumsPath = join(dir, `${p.type}_${v}_SHA256SUMS`);
      writeFileSync(sumsPath, sums);
      files.set(
        `${p.type}_${v}_SHA256SUMS.sig`,
        run("gpg", ["--batch", "--output", "-", "--detach-sign", sumsPath], gpgEnv),
      );
      writeFileSync(`${sumsPath}.other`, Buffer.concat([sums, Buffer.from("\n")]));
      files.set(
        `${p.type}_${v}_SHA256SUMS.badsig`,
        run("gpg", ["--batch", "--output", "-", "--detach-sign", `${sumsPath}.other`], gpgEnv),
      );
    }
  }
  try {
    run("gpgconf", ["--kill", "all"], gpgEnv);
  } catch {
    // No agent was left running.
  }
  rmSync(gnupg, { recursive: true, force: true });
  for (const m of modules) {
    for (const v of m.versions) {
      const src = join(dir, "modules", `${m.name}_${v}`);
      mkdirSync(src, { recursive: true });
      for (const [name, text] of Object.entries(m.files)) writeFileSync(join(src, name), text.replaceAll("VERSION", v));
      const tgz = join(dir, `module-${m.name}-${v}.tar.gz`);
      run("tar", ["-czf", tgz, "-C", src, "."]);
      files.set(`module-${m.name}-${v}.tar.gz`, readFileSync(tgz));
    }
  }

  const reg: Omit<TestRegistry, "host" | "close"> = {
    caFile: tls.cert,
    downloads: new Map(),
    requests: [],
    tamper: {},
    source: (type) => `${host}/drover/${type}`,
    h1: (type, v) => hashes.get(`${type}/${v}`)?.h1 ?? "",
    zh: (type, v) => hashes.get(`${type}/${v}`)?.zh ?? "",
    archiveName: (type, v) => hashes.get(`${type}/${v}`)?.archive ?? "",
  };
  const json = (res: ServerResponse, body: unknown): void => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  const server: Server = createServer({ key: readFileSync(tls.key), cert: readFileSync(tls.cert) }, (req, res) => {
    const path = (req.url ?? "").split("?")[0] ?? "";
    reg.requests.push(path);
    let m: RegExpExecArray | null;
    if (path === "/.well-known/terraform.json")
      return json(res, { "providers.v1": "/v1/providers/", "modules.v1": "/v1/modules/" });
    if ((m = /^\/v1\/modules\/drover\/([a-z]+)\/null\/versions$/.exec(path))) {
      const mod = modules.find((x) => x.name === m?.[1]);
      if (!mod) return void res.writeHead(404).end();
      return json(res, { modules: [{ versions: mod.versions.map((version) => ({ version })) }] });
    }
    if ((m = /^\/v1\/modules\/drover\/([a-z]+)\/null\/([^/]+)\/download$/.exec(path))) {
      if (!files.has(`module-${m[1]}-${m[2]}.tar.gz`)) return void res.writeHead(404).end();
      return void res.writeHead(204, { "x-terraform-get": `/files/module-${m[1]}-${m[2]}.tar.gz` }).end();
    }
    if ((m = /^\/v1\/providers\/drover\/([a-z]+)\/versions$/.exec(path))) {
      const p = providers.find((x) => x.type === m?.[1]);
      if (!p) return void res.writeHead(404).end();
      return json(res, {
        versions: p.versions.map((version) => ({
          version,
          protocols: ["6.0"],
          platforms: [{ os: "linux", arch: "amd64" }],
        })),
      });
    }
    if ((m = /^\/v1\/providers\/drover\/([a-z]+)\/([^/]+)\/download\/linux\/amd64$/.exec(path))) {
      const [type, v] = [m[1] as string, m[2] as string];
      const h = hashes.get(`${type}/${v}`);
      if (!h) return void res.writeHead(404).end();
      return json(res, {
        protocols: ["6.0"],
        os: "linux",
        arch: "amd64",
        filename: h.archive,
        download_url: `/files/${h.archive}`,
        shasums_url: `/files/${type}_${v}_SHA256SUMS`,
        shasums_signature_url: `/files/${type}_${v}_SHA256SUMS.${reg.tamper.signature ? "badsig" : "sig"}`,
        shasum: reg.tamper.shasum ? "0".repeat(64) : h.zh.slice(3),
        signing_keys: { gpg_public_keys: [{ key_id: keyId, ascii_armor: armoredKey }] },
      });
    }
    if ((m = /^\/files\/([^/]+)$/.exec(path))) {
      const name = m[1] as string;
      let body = files.get(name);
      if (!body) return void res.writeHead(404).end();
      if (name.endsWith(".zip") || name.endsWith(".tar.gz")) {
        reg.downloads.set(name, (reg.downloads.get(name) ?? 0) + 1);
        if (reg.tamper.archive) body = Buffer.concat([body, Buffer.from("tampered")]);
      }
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
      return void res.end(body);
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const host = `127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  return {
    ...reg,
    host,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A root module that needs each of `types` from `registry` (exact versions) and uses each once. */
export function providerConfig(
  registry: TestRegistry,
  types: Array<{ type: string; version: string }>,
  input = "hello",
): string {
  const req = types
    .map((t) => `    ${t.type} = { source = "${registry.source(t.type)}", version = "${t.version}" }`)
    .join("\n");
  const res = types
    .map(
      (t) =>
        `resource "${t.type}_thing" "x" { input = "${input}-${t.type}" }\noutput "${t.type}" { value = ${t.type}_thing.x.input }`,
    )
    .join("\n");
  return `terraform {\n  required_providers {\n${req}\n  }\n}\n${res}\n`;
}
