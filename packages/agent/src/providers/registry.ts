import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { pipeline } from "node:stream/promises";
import { Transform } from "node:stream";
import type * as OpenPgp from "openpgp";
import type { Dispatcher } from "undici";
import { messageOf } from "@drover/protocol";
import { transportRequest as request } from "@drover/runtime";
import { VerificationError } from "./errors.js";
import { checkFetchTarget, FetchRefused } from "../net/fetch-guard.js";

/** A provider address as terraform writes it in lock files: `host/namespace/type`, lower case. */
export interface ProviderAddress {
  host: string;
  namespace: string;
  type: string;
}

export function addressString(a: ProviderAddress): string {
  return `${a.host}/${a.namespace}/${a.type}`;
}

/** The registry's answer to a download request, checked for shape. */
export interface DownloadInfo {
  filename: string;
  downloadUrl: string;
  shasum: string;
  shasumsUrl: string | undefined;
  signatureUrl: string | undefined;
  armoredKeys: string[];
}

/** Something went wrong talking to a registry (not a verification failure): terraform may try itself. */
export class RegistryUnavailable extends Error {}

const name = /^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$/;
const maxJsonBytes = 4 << 20;

/** The provider registry protocol (discovery, versions, download), over the agent's own HTTP client. */
export class RegistryClient {
  private readonly discovered = new Map<string, Promise<URL>>();

  private readonly timeoutMs: number;
  private readonly allowMetadataAddresses: boolean;

  /**
   * `allowMetadataAddresses`: also fetch from link-local and cloud metadata addresses (see
   * fetch-guard.ts); off for what a configuration names, on for the operator's own URLs.
   */
  constructor(
    private readonly dispatcher: Dispatcher,
    options: { timeoutMs?: number; allowMetadataAddresses?: boolean } = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.allowMetadataAddresses = options.allowMetadataAddresses ?? false;
  }

  /** GET following up to 3 redirects (registries often send downloads elsewhere), each checked before it is asked. */
  private async open(url: URL | string, signal: AbortSignal): Promise<Dispatcher.ResponseData> {
    let at = new URL(url);
    for (let hop = 0; ; hop++) {
      let res: Dispatcher.ResponseData;
      try {
        if (!this.allowMetadataAddresses) await checkFetchTarget(at);
        res = await request(at, { dispatcher: this.dispatcher, signal });
      } catch (err) {
        if (err instanceof FetchRefused) throw err;
        throw new RegistryUnavailable(`${at.href}: ${messageOf(err)}`);
      }
      const location = res.headers.location;
      if (res.statusCode < 300 || res.statusCode >= 400 || typeof location !== "string" || hop >= 3) return res;
      // Read off (a small redirect body) rather than destroyed: destroying a body not yet ended raises an abort error.
      await res.body.dump().catch(() => undefined);
      at = new URL(location, at);
    }
  }

  private async get(
    url: URL | string,
    signal: AbortSignal,
    limit: number,
  ): Promise<{ status: number; body: Buffer; type: string; location: string | undefined }> {
    const res = await this.open(url, AbortSignal.any([signal, AbortSignal.timeout(this.timeoutMs)]));
    const get = res.headers["x-terraform-get"];
    const parts: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        res.body.destroy();
        throw new RegistryUnavailable(`${String(url)}: answer larger than ${limit} bytes`);
      }
      parts.push(chunk as Buffer);
    }
    return {
      status: res.statusCode,
      body: Buffer.concat(parts),
      type: String(res.headers["content-type"] ?? ""),
      location: typeof get === "string" ? get : undefined,
    };
  }

  private async json(url: URL, signal: AbortSignal): Promise<unknown> {
    const res = await this.get(url, signal, maxJsonBytes);
    if (res.status !== 200) throw new RegistryUnavailable(`${url.href} answered ${res.status}`);
    try {
      return JSON.parse(res.body.toString("utf8"));
    } catch {
      throw new RegistryUnavailable(`${url.href} did not answer JSON`);
    }
  }

  /** A registry service's base URL (service discovery, once per host and service). */
  private base(
    host: string,
    signal: AbortSignal,
    service: "providers.v1" | "modules.v1" = "providers.v1",
  ): Promise<URL> {
    const key = `${service} ${host}`;
    let found = this.discovered.get(key);
    if (!found) {
      found = (async () => {
        const wellKnown = new URL(`https://${host}/.well-known/terraform.json`);
        const doc = (await this.json(wellKnown, signal)) as Record<string, unknown>;
        const v1 = doc[service];
        if (typeof v1 !== "string") throw new RegistryUnavailable(`${host} offers no ${service} registry`);
        return new URL(v1.endsWith("/") ? v1 : `${v1}/`, wellKnown);
      })();
      found.catch(() => this.discovered.delete(key));
      this.discovered.set(key, found);
    }
    return found;
  }

  /** Versions of a registry module (`ns/name/system`). */
  async moduleVersions(host: string, path: string, signal: AbortSignal): Promise<string[]> {
    const base = await this.base(host, signal, "modules.v1");
    const doc = (await this.json(new URL(`${path}/versions`, base), signal)) as {
      modules?: Array<{ versions?: Array<{ version?: unknown }> }>;
    };
    return (doc.modules?.[0]?.versions ?? []).map((v) => v.version).filter((v): v is string => typeof v === "string");
  }

  /** Where a registry module version's package is (its X-Terraform-Get, resolved). */
  async moduleLocation(host: string, path: string, version: string, signal: AbortSignal): Promise<string> {
    const base = await this.base(host, signal, "modules.v1");
    const url = new URL(`${path}/${version}/download`, base);
    const res = await this.get(url, signal, maxJsonBytes);
    const header = res.location;
    if ((res.status !== 204 && res.status !== 200) || !header)
      throw new RegistryUnavailable(`${url.href} gave no X-Terraform-Get (answered ${res.status})`);
    return new URL(header, url).href;
  }

  /** A whole document of at most `limit` bytes. */
  async fetchBytes(url: string, limit: number, signal: AbortSignal): Promise<Buffer> {
    const res = await this.get(url, signal, limit);
    if (res.status !== 200) throw new RegistryUnavailable(`${url} answered ${res.status}`);
    return res.body;
  }

  /** Versions the registry offers for `platform` (`linux_amd64`). */
  async versions(a: ProviderAddress, platform: string, signal: AbortSignal): Promise<string[]> {
    const base = await this.base(a.host, signal);
    const doc = (await this.json(new URL(`${a.namespace}/${a.type}/versions`, base), signal)) as {
      versions?: Array<{ version?: unknown; platforms?: Array<{ os?: unknown; arch?: unknown }> }>;
    };
    const [os, arch] = platform.split("_");
    return (doc.versions ?? [])
      .filter((v) => typeof v.version === "string" && (v.platforms ?? []).some((p) => p.os === os && p.arch === arch))
      .map((v) => v.version as string);
  }

  /** The download document for one version and platform, checked for shape. */
  async download(a: ProviderAddress, version: string, platform: string, signal: AbortSignal): Promise<DownloadInfo> {
    const base = await this.base(a.host, signal);
    const [os, arch] = platform.split("_");
    const url = new URL(`${a.namespace}/${a.type}/${version}/download/${os}/${arch}`, base);
    const d = (await this.json(url, signal)) as Record<string, unknown>;
    const keys = (
      (d.signing_keys as { gpg_public_keys?: Array<{ ascii_armor?: unknown }> } | undefined)?.gpg_public_keys ?? []
    )
      .map((k) => k.ascii_armor)
      .filter((k): k is string => typeof k === "string");
    if (d.os !== os || d.arch !== arch)
      throw new VerificationError(
        "provider_registry_invalid",
        `${url.href} answered for ${String(d.os)}_${String(d.arch)}, not ${platform}`,
      );
    if (typeof d.filename !== "string" || !name.test(d.filename))
      throw new VerificationError("provider_registry_invalid", `${url.href} gave no usable filename`);
    if (typeof d.shasum !== "string" || !/^[0-9a-f]{64}$/.test(d.shasum))
      throw new VerificationError("provider_registry_invalid", `${url.href} gave no sha256 shasum`);
    if (typeof d.download_url !== "string")
      throw new VerificationError("provider_registry_invalid", `${url.href} gave no download_url`);
    return {
      filename: d.filename,
      downloadUrl: new URL(d.download_url, url).href,
      shasum: d.shasum,
      shasumsUrl: typeof d.shasums_url === "string" ? new URL(d.shasums_url, url).href : undefined,
      signatureUrl:
        typeof d.shasums_signature_url === "string" ? new URL(d.shasums_signature_url, url).href : undefined,
      armoredKeys: keys,
    };
  }

  /**
   * The SHA256SUMS document, checked: it lists `info.filename` with `info.shasum`, and when the
   * registry names signing keys, its detached signature verifies against one of them (keys
   * past their expiry are accepted as terraform accepts them: checked as of the signature's date).
   */
  async checksums(info: DownloadInfo, signal: AbortSignal): Promise<Map<string, string>> {
    const sums = new Map<string, string>();
    if (!info.shasumsUrl) {
      if (info.armoredKeys.length > 0)
        throw new VerificationError(
          "provider_signature_invalid",
          "the registry names signing keys but no SHA256SUMS document",
        );
      sums.set(info.filename, info.shasum);
      return sums;
    }
    const doc = await this.get(info.shasumsUrl, signal, 1 << 20);
    if (doc.status !== 200) throw new RegistryUnavailable(`${info.shasumsUrl} answered ${doc.status}`);
    for (const line of doc.body.toString("utf8").split("\n")) {
      const m = /^([0-9a-f]{64})\s+(\S+)$/.exec(line.trim());
      if (m) sums.set(m[2] as string, m[1] as string);
    }
    if (sums.get(info.filename) !== info.shasum) {
      throw new VerificationError(
        "provider_checksum_mismatch",
        `the registry's shasum ${info.shasum} for ${info.filename} is not the one its SHA256SUMS lists (${sums.get(info.filename) ?? "none"})`,
      );
    }
    if (info.armoredKeys.length > 0) {
      if (!info.signatureUrl)
        throw new VerificationError(
          "provider_signature_invalid",
          "the registry names signing keys but no SHA256SUMS signature",
        );
      const sig = await this.get(info.signatureUrl, signal, 64 << 10);
      if (sig.status !== 200) throw new RegistryUnavailable(`${info.signatureUrl} answered ${sig.status}`);
      await verifySignature(doc.body, sig.body, info.armoredKeys, info.filename);
    }
    return sums;
  }

  /** Downloads the archive to `path`; returns its sha256 (hex). */
  async fetchArchive(info: DownloadInfo, path: string, maxBytes: number, signal: AbortSignal): Promise<string> {
    const res = await this.open(info.downloadUrl, signal);
    if (res.statusCode !== 200) {
      res.body.destroy();
      throw new RegistryUnavailable(`${info.downloadUrl} answered ${res.statusCode}`);
    }
    const hash = createHash("sha256");
    let size = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        if (size > maxBytes)
          return done(
            new VerificationError("provider_archive_invalid", `${info.filename} is larger than ${maxBytes} bytes`),
          );
        hash.update(chunk);
        done(null, chunk);
      },
    });
    await pipeline(res.body, meter, createWriteStream(path, { flags: "wx", mode: 0o600 }));
    return hash.digest("hex");
  }
}

/** Verifies a binary detached OpenPGP signature of `data` against armored public keys. */
export async function verifySignature(
  data: Buffer,
  signature: Buffer,
  armoredKeys: string[],
  what: string,
): Promise<void> {
  // Loaded on first use: it is large, and an idle agent (or the CLI) never needs it.
  const openpgp: typeof OpenPgp = await import("openpgp");
  let sig: OpenPgp.Signature;
  const keys: OpenPgp.Key[] = [];
  try {
    sig = await openpgp.readSignature({ binarySignature: new Uint8Array(signature) });
    for (const armored of armoredKeys) keys.push(await openpgp.readKey({ armoredKey: armored }));
  } catch (err) {
    throw new VerificationError(
      "provider_signature_invalid",
      `the signature of the SHA256SUMS of ${what} or its keys cannot be read: ${messageOf(err)}`,
    );
  }
  const created = sig.packets[0]?.created ?? undefined;
  try {
    const message = await openpgp.createMessage({ binary: new Uint8Array(data) });
    const result = await openpgp.verify({
      message,
      signature: sig,
      verificationKeys: keys,
      expectSigned: true,
      format: "binary",
      ...(created ? { date: created } : {}),
    });
    for (const s of result.signatures) await s.verified;
  } catch (err) {
    throw new VerificationError(
      "provider_signature_invalid",
      `the SHA256SUMS of ${what} is not signed by the registry's keys: ${messageOf(err)}`,
    );
  }
}
