import { messageOf, type Engine } from "@drover/protocol";
import type * as OpenPgp from "openpgp";
import { RegistryUnavailable, verifySignature, type RegistryClient } from "../providers/registry.js";
import { EngineError } from "./errors.js";
import type { ReleaseLayout } from "./releases.js";

/*
 * Whether a release may be downloaded at all: its SHA256SUMS carries a detached signature by a
 * key whose fingerprint is pinned, and lists the archive for this platform, whose sha256 the
 * download must then have.
 */

/** A release's archive for this platform, as the verified SHA256SUMS lists it. */
export interface VerifiedRelease {
  /** The archive's sha256. */
  digest: string;
  archive: string;
  /** The fingerprint of the pinned key that signed the SHA256SUMS. */
  signer: string;
}

export interface ReleaseVerifierOptions {
  http: RegistryClient;
  /** `os_arch` of the archive wanted. */
  platform: string;
  /** Armored public keys signatures may come from (only pinned ones count). */
  signingKeys: string[];
  /** Fingerprints (upper-case hex) of the keys whose signatures are trusted. */
  trustedFingerprints: string[];
}

export class ReleaseVerifier {
  private keys: Promise<OpenPgp.Key[]> | undefined;

  constructor(private readonly options: ReleaseVerifierOptions) {}

  /** The archive's sha256 as the signed SHA256SUMS lists it, once its signature is verified. */
  async verifiedSums(
    engine: Engine,
    version: string,
    layout: ReleaseLayout,
    signal: AbortSignal,
  ): Promise<VerifiedRelease> {
    const get = async (file: string, limit: number): Promise<Buffer> => {
      try {
        return await this.options.http.fetchBytes(layout.url(version, file), limit, signal);
      } catch (err) {
        if (err instanceof RegistryUnavailable && / answered 404$/.test(err.message)) {
          throw new EngineError(
            "engine_version_missing",
            `${engine} ${version} has no ${file} at ${layout.url(version, file)}`,
          );
        }
        throw new EngineError("engine_releases_unreachable", `${engine} ${version}: ${messageOf(err)}`);
      }
    };
    const sums = await get(layout.sums(version), 1 << 20);
    const signature = await get(layout.signature(version), 64 << 10);
    const signer = await this.verifySums(sums, signature, `${engine} ${version}`);
    const archive = layout.archive(version, this.options.platform);
    const line = sums
      .toString("utf8")
      .split("\n")
      .map((l) => /^([0-9a-f]{64})\s+\*?(\S+)$/.exec(l.trim()))
      .find((m) => m?.[2] === archive);
    if (!line?.[1])
      throw new EngineError(
        "engine_version_missing",
        `${engine} ${version} has no build for ${this.options.platform} (${archive} is not in its SHA256SUMS)`,
      );
    return { digest: line[1], archive, signer };
  }

  private trustedKeys(): Promise<OpenPgp.Key[]> {
    this.keys ??= (async () => {
      const openpgp: typeof OpenPgp = await import("openpgp");
      const keys: OpenPgp.Key[] = [];
      for (const armored of this.options.signingKeys) keys.push(...(await openpgp.readKeys({ armoredKeys: armored })));
      return keys.filter((k) => this.options.trustedFingerprints.includes(k.getFingerprint().toUpperCase()));
    })();
    return this.keys;
  }

  /** Checks the SHA256SUMS signature against the pinned keys; returns the signer's fingerprint. */
  private async verifySums(sums: Buffer, signature: Buffer, what: string): Promise<string> {
    const openpgp: typeof OpenPgp = await import("openpgp");
    let issuers: string[];
    try {
      const sig = await openpgp.readSignature({ binarySignature: new Uint8Array(signature) });
      issuers = sig.getSigningKeyIDs().map((id) => id.toHex().toUpperCase());
    } catch (err) {
      throw new EngineError(
        "engine_signature_invalid",
        `the signature of the SHA256SUMS of ${what} cannot be read: ${messageOf(err)}`,
      );
    }
    const keys = (await this.trustedKeys()).filter((k) =>
      k.getKeyIDs().some((id) => issuers.includes(id.toHex().toUpperCase())),
    );
    const signer = keys[0];
    if (!signer) {
      throw new EngineError(
        "engine_key_unknown",
        `the SHA256SUMS of ${what} is signed by key ${issuers.join(", ") || "(none named)"}, which is not a pinned key (DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS, keys from DROVER_AGENT_ENGINE_SIGNING_KEYS); nothing was downloaded or run`,
      );
    }
    try {
      await verifySignature(
        sums,
        signature,
        keys.map((k) => k.armor()),
        what,
      );
    } catch (err) {
      throw new EngineError("engine_signature_invalid", `${messageOf(err)}; nothing was downloaded or run`);
    }
    return signer.getFingerprint().toUpperCase();
  }
}
