import type { Engine } from "@drover/protocol";

/*
 * Where an engine's releases are, laid out as each vendor publishes them:
 *  - terraform (releases.hashicorp.com/terraform): `index.json` lists versions under "versions";
 *    `<v>/terraform_<v>_<os>_<arch>.zip`, `<v>/terraform_<v>_SHA256SUMS`, `<v>/terraform_<v>_SHA256SUMS.sig`.
 *  - tofu (GitHub releases of opentofu/opentofu): `v<v>/tofu_<v>_<os>_<arch>.zip`,
 *    `v<v>/tofu_<v>_SHA256SUMS`, `v<v>/tofu_<v>_SHA256SUMS.gpgsig`; versions from a separate
 *    index (get.opentofu.org/tofu/api.json: `{"versions":[{"id":"1.8.0"}]}`).
 * Signatures are binary detached OpenPGP signatures of the SHA256SUMS document.
 */

/** The URLs of one engine's releases. */
export interface ReleaseLayout {
  /** The document listing the versions offered. */
  readonly indexUrl: string;
  /** The archive's file name for a version and platform (`linux_amd64`). */
  archive(version: string, platform: string): string;
  url(version: string, file: string): string;
  sums(version: string): string;
  signature(version: string): string;
  /** The versions an index document lists. */
  versions(doc: unknown): string[];
}

/** Default release locations (each replaced by a setting). */
export const defaultReleases = {
  terraform: "https://releases.hashicorp.com/terraform",
  tofu: "https://github.com/opentofu/opentofu/releases/download",
  tofuIndex: "https://get.opentofu.org/tofu/api.json",
} as const;

const base = (url: string): string => url.replace(/\/+$/, "");

/** The release layout of `engine` under its base URL (`indexUrl`: tofu's version list). */
export function releaseLayout(engine: Engine, baseUrl: string, indexUrl?: string): ReleaseLayout {
  const b = base(baseUrl);
  if (engine === "terraform") {
    return {
      indexUrl: `${b}/index.json`,
      archive: (v, p) => `terraform_${v}_${p}.zip`,
      url: (v, f) => `${b}/${v}/${f}`,
      sums: (v) => `terraform_${v}_SHA256SUMS`,
      signature: (v) => `terraform_${v}_SHA256SUMS.sig`,
      versions: (doc) => Object.keys((doc as { versions?: Record<string, unknown> } | null)?.versions ?? {}),
    };
  }
  return {
    indexUrl: indexUrl ?? defaultReleases.tofuIndex,
    archive: (v, p) => `tofu_${v}_${p}.zip`,
    url: (v, f) => `${b}/v${v}/${f}`,
    sums: (v) => `tofu_${v}_SHA256SUMS`,
    signature: (v) => `tofu_${v}_SHA256SUMS.gpgsig`,
    versions: (doc) =>
      ((doc as { versions?: Array<{ id?: unknown }> } | null)?.versions ?? [])
        .map((v) => v.id)
        .filter((v): v is string => typeof v === "string"),
  };
}
