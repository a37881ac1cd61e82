import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

/*
 * A terraform/tofu release server on 127.0.0.1, laid out as HashiCorp (`/terraform/index.json`,
 * `/terraform/<v>/terraform_<v>_linux_amd64.zip`, `_SHA256SUMS`, `_SHA256SUMS.sig`) and OpenTofu
 * (`/tofu/api.json`, `/tofu/v<v>/tofu_<v>_linux_amd64.zip`, `_SHA256SUMS`, `_SHA256SUMS.gpgsig`)
 * publish, signed by a throwaway GnuPG key. A fake release is a shell script that records in
 * `executed()` that it ran; a release may instead carry a real binary. Each release can be told
 * to lie (archive changed after signing, a signature over other data, a signature by another key).
 */

export interface TestRelease {
  engine: "terraform" | "tofu";
  version: string;
  /** A real executable to ship; default: a fake that reports `version` and records that it ran. */
  binary?: string;
  /** Listed in the index but its files are gone (a half-published release). */
  filesMissing?: boolean;
}

export type ReleaseLie = "archive" | "signature" | "unknown-key";

export interface TestReleaseServer {
  /** Base URL of the engine's releases (DROVER_AGENT_TERRAFORM_RELEASES_URL / _TOFU_RELEASES_URL). */
  base(engine: "terraform" | "tofu"): string;
  /** tofu's version list (DROVER_AGENT_TOFU_VERSIONS_URL). */
  tofuIndex: string;
  /** The armored public key of the signing key (DROVER_AGENT_ENGINE_SIGNING_KEYS). */
  keyFile: string;
  /** Its fingerprint (DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS). */
  fingerprint: string;
  /** Archive downloads by file name. */
  downloads: Map<string, number>;
  /** Every request path. */
  requests: string[];
  /** Makes a release lie from now on (undefined: tell the truth again). */
  lie(engine: string, version: string, how: ReleaseLie | undefined): void;
  /** Holds the release's archive downloads until the returned function is called. */
  stall(engine: string, version: string): () => void;
  /** Whether a fake release's binary ever ran. */
  executed(engine: string, version: string): boolean;
  /** sha256 of a release's archive as signed. */
  archiveSha(engine: string, version: string): string;
  close(): Promise<void>;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): Buffer {
  return execFileSync(cmd, args, { env, stdio: ["ignore", "pipe", "pipe"] });
}

export async function startReleaseServer(releases: TestRelease[]): Promise<TestReleaseServer> {
  const dir = mkdtempSync(join(tmpdir(), "drover-releases-"));
  chmodSync(dir, 0o755);
  const marks = join(dir, "executed");
  mkdirSync(marks, { mode: 0o777 });
  chmodSync(marks, 0o777);
  const gnupg = mkdtempSync(join(tmpdir(), "gpg-"));
  const gpgEnv = { ...process.env, GNUPGHOME: gnupg };
  const gen = (uid: string): string => {
    run("gpg", ["--batch", "--passphrase", "", "--quick-gen-key", uid, "rsa2048", "sign", "never"], gpgEnv);
    const listing = run("gpg", ["--batch", "--with-colons", "--list-keys", uid], gpgEnv).toString("utf8");
    return /^fpr:+([0-9A-F]{40}):/m.exec(listing)?.[1] ?? "";
  };
  const fingerprint = gen("Drover Test Releases <releases@drover.dev>");
  const other = gen("Someone Else <else@drover.dev>");
  const keyFile = join(dir, "releases.asc");
  writeFileSync(keyFile, run("gpg", ["--batch", "--armor", "--export", fingerprint], gpgEnv));
  const sign = (file: string, key: string): Buffer =>
    run("gpg", ["--batch", "--local-user", key, "--output", "-", "--detach-sign", file], gpgEnv);

  const files = new Map<string, Buffer>();
  const shas = new Map<string, string>();
  const lies = new Map<string, ReleaseLie>();
  const stalls = new Map<string, Promise<void>>();
  for (const r of releases) {
    const pkg = join(dir, "pkg", `${r.engine}_${r.version}`);
    mkdirSync(pkg, { recursive: true });
    const exe = join(pkg, r.engine);
    if (r.binary) copyFileSync(r.binary, exe);
    else {
      const mark = join(marks, `${r.engine}-${r.version}`);
      writeFileSync(
        exe,
        `#!/bin/sh\n: > "${mark}"\nif [ "$1" = version ]; then echo '{"terraform_version":"${r.version}"}'; fi\n`,
      );
    }
    chmodSync(exe, 0o755);
    writeFileSync(join(pkg, "LICENSE.txt"), `test release ${r.version}\n`);
    const archive = `${r.engine}_${r.version}_linux_amd64.zip`;
    const zipPath = join(dir, archive);
    // Stored, not deflated: a real terraform zips in a second this way.
    run("zip", ["-0", "-X", "-j", "-q", zipPath, exe, join(pkg, "LICENSE.txt")]);
    const zip = readFileSync(zipPath);
    const sha = createHash("sha256").update(zip).digest("hex");
    shas.set(`${r.engine}/${r.version}`, sha);
    // Other platforms' lines, as a real SHA256SUMS has them.
    const sums = Buffer.from(`${"1".repeat(64)}  ${r.engine}_${r.version}_darwin_arm64.zip\n${sha}  ${archive}\n`);
    const sumsPath = join(dir, `${r.engine}_${r.version}_SHA256SUMS`);
    writeFileSync(sumsPath, sums);
    writeFileSync(`${sumsPath}.other`, Buffer.concat([sums, Buffer.from("\n")]));
    const prefix = r.engine === "terraform" ? `/terraform/${r.version}` : `/tofu/v${r.version}`;
    const sigName = r.engine === "terraform" ? "_SHA256SUMS.sig" : "_SHA256SUMS.gpgsig";
    if (r.filesMissing) continue;
    files.set(`${prefix}/${archive}`, zip);
    files.set(`${prefix}/${r.engine}_${r.version}_SHA256SUMS`, sums);
    files.set(`${prefix}/${r.engine}_${r.version}${sigName}`, sign(sumsPath, fingerprint));
    files.set(`lie:signature:${prefix}/${r.engine}_${r.version}${sigName}`, sign(`${sumsPath}.other`, fingerprint));
    files.set(`lie:unknown-key:${prefix}/${r.engine}_${r.version}${sigName}`, sign(sumsPath, other));
    files.set(
      `lie:archive:${prefix}/${archive}`,
      Buffer.concat([zip.subarray(0, zip.length - 22), Buffer.from("tampered!!"), zip.subarray(zip.length - 22)]),
    );
  }
  try {
    run("gpgconf", ["--kill", "all"], gpgEnv);
  } catch {
    // No gpg-agent was left running.
  }
  rmSync(gnupg, { recursive: true, force: true });

  const terraformIndex = {
    name: "terraform",
    versions: Object.fromEntries(
      releases
        .filter((r) => r.engine === "terraform")
        .map((r) => [
          r.version,
          {
            name: "terraform",
            version: r.version,
            shasums: `terraform_${r.version}_SHA256SUMS`,
            shasums_signature: `terraform_${r.version}_SHA256SUMS.sig`,
            builds: [{ os: "linux", arch: "amd64", filename: `terraform_${r.version}_linux_amd64.zip` }],
          },
        ]),
    ),
  };
  const tofuIndex = {
    versions: releases
      .filter((r) => r.engine === "tofu")
      .map((r) => ({ id: r.version, files: [`tofu_${r.version}_linux_amd64.zip`] })),
  };
  const downloads = new Map<string, number>();
  const requests: string[] = [];
  const lieOf = (path: string): ReleaseLie | undefined => {
    const m = /^\/(terraform|tofu)\/v?([^/]+)\//.exec(path);
    return m ? lies.get(`${m[1]}/${m[2]}`) : undefined;
  };
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0] ?? "";
    requests.push(path);
    const json = (body: unknown): void => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (path === "/terraform/index.json") return json(terraformIndex);
    if (path === "/tofu/api.json") return json(tofuIndex);
    const lie = lieOf(path);
    const body = (lie ? files.get(`lie:${lie}:${path}`) : undefined) ?? files.get(path);
    if (!body) return void res.writeHead(404).end();
    const send = (): void => {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
      res.end(body);
    };
    if (path.endsWith(".zip")) {
      const name = path.split("/").pop() ?? path;
      downloads.set(name, (downloads.get(name) ?? 0) + 1);
      const m = /^\/(terraform|tofu)\/v?([^/]+)\//.exec(path);
      const stalled = m ? stalls.get(`${m[1]}/${m[2]}`) : undefined;
      if (stalled) return void stalled.then(send);
    }
    send();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const origin = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  return {
    base: (engine) => `${origin}/${engine}`,
    tofuIndex: `${origin}/tofu/api.json`,
    keyFile,
    fingerprint,
    downloads,
    requests,
    lie(engine, version, how) {
      if (how) lies.set(`${engine}/${version}`, how);
      else lies.delete(`${engine}/${version}`);
    },
    stall(engine, version) {
      let open = (): void => {};
      stalls.set(`${engine}/${version}`, new Promise<void>((resolve) => (open = resolve)));
      return () => {
        stalls.delete(`${engine}/${version}`);
        open();
      };
    },
    executed: (engine, version) => existsSync(join(marks, `${engine}-${version}`)),
    archiveSha: (engine, version) => shas.get(`${engine}/${version}`) ?? "",
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
