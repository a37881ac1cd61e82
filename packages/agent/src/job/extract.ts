import { DroverError } from "@drover/protocol";
import { defaultArchiveLimits, inspectArchive, unsafePathReason, type ArchiveLimits } from "@drover/runtime";
import { mkdirSync } from "node:fs";
import type { Stats } from "node:fs";
import { x as extractTar, type ReadEntry } from "tar";

const allowed = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink", "Link"]);

/**
 * Unpacks a configuration into `dir`, writing nothing outside it. The whole archive is
 * checked first (paths, links, devices, sizes — the same check the server made at upload,
 * repeated because the agent trusts nothing it did not verify), then tar extracts with its own
 * path protections and a filter that refuses anything but files, directories and links.
 */
export async function extractConfiguration(
  archive: Buffer,
  dir: string,
  limits: ArchiveLimits = defaultArchiveLimits,
): Promise<void> {
  await inspectArchive(archive, limits);
  mkdirSync(dir, { recursive: true });
  let refused: string | undefined;
  const unpack = extractTar({
    cwd: dir,
    strict: true,
    preservePaths: false,
    preserveOwner: false,
    // Modes come from the archive filtered by the process umask (0077 for the local driver);
    // never chmod an existing directory, such as the private run directory, to the archive's mode.
    noChmod: true,
    umask: process.umask(),
    filter: (path: string, entry: ReadEntry | Stats) => {
      const type = "type" in entry ? String(entry.type) : undefined;
      const reason = unsafePathReason(path) ?? (type && !allowed.has(type) ? `is a ${type}` : undefined);
      if (reason) refused ??= `${path} ${reason}`;
      return !reason;
    },
  });
  await new Promise<void>((resolve, reject) => {
    unpack.on("error", (err: Error) =>
      reject(new DroverError("invalid_archive", `cannot unpack the configuration: ${err.message}`, { cause: err })),
    );
    unpack.on("close", () => resolve());
    unpack.end(archive);
  });
  if (refused) throw new DroverError("invalid_archive", `the configuration archive entry ${refused}`);
}
