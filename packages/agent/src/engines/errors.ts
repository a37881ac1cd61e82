import { DroverError, type ErrorCode } from "@drover/protocol";

/** Why an engine could not be provided; the run's error message starts with it. */
export type EngineFailure =
  | "engine_checksum_mismatch"
  | "engine_signature_invalid"
  | "engine_key_unknown"
  | "engine_archive_invalid"
  | "engine_version_missing"
  | "engine_releases_unreachable"
  | "engine_unavailable";

/** Failures that are about trust: never answered by running another binary. */
const verification = new Set<EngineFailure>([
  "engine_checksum_mismatch",
  "engine_signature_invalid",
  "engine_key_unknown",
  "engine_archive_invalid",
]);

const codes: Record<EngineFailure, ErrorCode> = {
  engine_checksum_mismatch: "verification_failed",
  engine_signature_invalid: "verification_failed",
  engine_key_unknown: "verification_failed",
  engine_archive_invalid: "verification_failed",
  engine_version_missing: "not_found",
  engine_releases_unreachable: "server_unreachable",
  engine_unavailable: "not_found",
};

/** The workspace's engine version cannot be run: fails the run with `reason: message`. */
export class EngineError extends DroverError {
  constructor(
    readonly reason: EngineFailure,
    message: string,
  ) {
    super(codes[reason], `${reason}: ${message}`);
  }

  /** A verification failure: the run fails, whatever the fallback setting says. */
  get untrusted(): boolean {
    return verification.has(this.reason);
  }
}
