import { DroverError } from "@drover/protocol";

/**
 * Something the cache fetched or holds is not what its source vouches for (checksum, signature,
 * lock file hash, archive). The run fails with this message; nothing unverified is used.
 */
export class VerificationError extends DroverError {
  constructor(
    /** A stable reason: provider_checksum_mismatch, provider_signature_invalid, provider_lock_mismatch, provider_archive_invalid. */
    readonly reason: string,
    message: string,
  ) {
    super("verification_failed", message);
  }
}
