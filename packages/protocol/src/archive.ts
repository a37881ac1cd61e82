import { posix } from "node:path";
import type { ReadEntry } from "tar";
import { DroverError } from "./errors.js";

/** Size limits for configuration archives; both ends enforce them. */
export interface ArchiveLimits {
  /** Largest accepted tar.gz, in bytes. */
  maxCompressedBytes: number;
  /** Largest sum of the sizes of all entries once unpacked, in bytes. */
  maxUnpackedBytes: number;
  /** Most entries an archive may hold. */
  maxEntries: number;
}

export const defaultArchiveLimits: ArchiveLimits = {
  maxCompressedBytes: 100 * 1024 * 1024,
  maxUnpackedBytes: 512 * 1024 * 1024,
  maxEntries: 100_000,
};

const allowedTypes = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink", "Link"]);

/** Why one archive path is unsafe, or undefined when it stays inside the root. */
export function unsafePathReason(path: string): string | undefined {
  if (path.includes("\0")) return "contains a NUL byte";
  if (path.startsWith("/") || /^[A-Za-z]:/.test(path) || path.startsWith("\\")) return "is an absolute path";
  if (path.split(/[\\/]/).includes("..")) return "climbs out of the archive root with '..'";
  return undefined;
}

function checkEntry(entry: ReadEntry): void {
  const path = entry.path;
  const reason = unsafePathReason(path);
  if (reason) throw new DroverError("invalid_archive", `archive entry ${JSON.stringify(path)} ${reason}`);
  if (!allowedTypes.has(entry.type)) {
    throw new DroverError("invalid_archive", `archive entry ${JSON.stringify(path)} is a ${entry.type}; only files, directories and links are allowed`);
  }
  if (entry.type === "SymbolicLink" || entry.type === "Link") {
    const target = entry.linkpath ?? "";
    if (target === "" || target.startsWith("/") || target.includes("\0")) {
      throw new DroverError("invalid_archive", `archive link ${JSON.stringify(path)} points to ${JSON.stringify(target)}, outside the archive`);
    }
    // Symlinks resolve against their own directory, hard links against the root.
    const base = entry.type === "SymbolicLink" ? posix.dirname(posix.normalize(path)) : ".";
    const resolved = posix.normalize(posix.join(base, target));
    if (resolved === ".." || resolved.startsWith("../")) {
      throw new DroverError("invalid_archive", `archive link ${JSON.stringify(path)} points to ${JSON.stringify(target)}, outside the archive`);
    }
  }
}

/** What an accepted archive holds. */
export interface ArchiveSummary {
  entries: number;
  unpackedBytes: number;
}

/**
 * Checks a tar.gz completely before anything is stored or extracted: every path relative and
 * inside the root, links resolving inside it, no devices or FIFOs, sizes within limits.
 * Throws DroverError("invalid_archive" | "payload_too_large") naming the first bad entry.
 */
export async function inspectArchive(archive: Buffer, limits: ArchiveLimits = defaultArchiveLimits): Promise<ArchiveSummary> {
  if (archive.length > limits.maxCompressedBytes) {
    throw new DroverError("payload_too_large", `the archive is ${archive.length} bytes; the limit is ${limits.maxCompressedBytes}`);
  }
  if (archive.length < 2 || archive[0] !== 0x1f || archive[1] !== 0x8b) {
    throw new DroverError("invalid_archive", "the upload is not a gzip-compressed tar archive (tar.gz)");
  }
  let entries = 0;
  let unpackedBytes = 0;
  let failure: unknown;
  // Loaded on first use: an idle agent never needs tar (its memory counts, SPEC §8).
  const { Parser } = await import("tar");
  const parser = new Parser({
    strict: true,
    onReadEntry: (entry: ReadEntry) => {
      try {
        if (failure) return;
        entries++;
        unpackedBytes += entry.size ?? 0;
        if (entries > limits.maxEntries) throw new DroverError("payload_too_large", `the archive holds more than ${limits.maxEntries} entries`);
        if (unpackedBytes > limits.maxUnpackedBytes) {
          throw new DroverError("payload_too_large", `the archive unpacks to more than ${limits.maxUnpackedBytes} bytes`);
        }
        checkEntry(entry);
      } catch (err) {
        failure ??= err;
      } finally {
        entry.resume();
      }
    },
  });
  await new Promise<void>((resolve) => {
    parser.on("error", (err: unknown) => {
      failure ??= new DroverError("invalid_archive", `the archive is corrupt: ${err instanceof Error ? err.message : String(err)}`);
      resolve();
    });
    parser.on("end", () => resolve());
    parser.on("close", () => resolve());
    parser.end(archive);
  });
  if (failure) throw failure;
  return { entries, unpackedBytes };
}
