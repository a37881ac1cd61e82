// What the Kubernetes engine-version tests share: the worker settings that point at the test
// release server, and a release binary that records it ran and hands over to real terraform.
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestReleaseServer } from "../support/engine-releases.js";

/** The engine settings of a worker (pod or node) using the test release server, with the fallback on. */
export function releaseEnv(releases: TestReleaseServer): { name: string; value: string }[] {
  return [
    { name: "DROVER_AGENT_TERRAFORM_RELEASES_URL", value: releases.base("terraform") },
    { name: "DROVER_AGENT_ENGINE_SIGNING_KEYS", value: releases.keyFile },
    { name: "DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS", value: releases.fingerprint },
    { name: "DROVER_AGENT_ENGINE_PATH_FALLBACK", value: "true" },
  ];
}

/**
 * A release binary for `version`: it answers `version` itself, and otherwise marks `mark`,
 * says so on stderr and runs this machine's terraform (the runs need a real one; only 1.11.4 is here).
 */
export function engineWrapper(version: string, mark: string): string {
  return `#!/bin/sh
if [ "$1" = version ]; then echo '{"terraform_version":"${version}"}'; exit 0; fi
: > "${mark}"
echo "release ${version} wrapping this machine's terraform" >&2
exec /usr/local/bin/terraform "$@"
`;
}

/**
 * A directory every pod user may write marks into, holding `engineWrapper(version)` as
 * `terraform-<version>`; the wrapper marks `ran-<version>` there when it runs.
 */
export function wrapperRelease(version: string): { marks: string; binary: string; ran: string } {
  const marks = mkdtempSync(join(tmpdir(), "drover-engine-marks-"));
  chmodSync(marks, 0o777);
  const binary = join(marks, `terraform-${version}`);
  const ran = join(marks, `ran-${version}`);
  writeFileSync(binary, engineWrapper(version, ran), { mode: 0o755 });
  return { marks, binary, ran };
}
