import { closeSync, fstatSync, mkdirSync, openSync, readSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { inflateRawSync } from "node:zlib";
import { VerificationError } from "./errors.js";

/** One file of a zip archive, as the central directory lists it. */
interface ZipEntry {
  name: string;
  method: number;
  compressedSize: number;
  size: number;
  localOffset: number;
  /** Unix mode from the external attributes (0 when the archive was not made on Unix). */
  mode: number;
}

const maxEntries = 10_000;

function readAt(fd: number, position: number, length: number): Buffer {
  const buf = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buf, done, length - done, position + done);
    if (n === 0) throw new VerificationError("provider_archive_invalid", "the provider archive ends early");
    done += n;
  }
  return buf;
}

function entries(fd: number, fileSize: number): ZipEntry[] {
  // The end-of-central-directory record sits in the last 64 KiB + 22 bytes.
  const tailLength = Math.min(fileSize, 65_557);
  const tail = readAt(fd, fileSize - tailLength, tailLength);
  const eocd = tail.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  if (eocd < 0) throw new VerificationError("provider_archive_invalid", "the provider archive is not a zip file");
  const count = tail.readUInt16LE(eocd + 10);
  const cdSize = tail.readUInt32LE(eocd + 12);
  const cdOffset = tail.readUInt32LE(eocd + 16);
  if (count > maxEntries || cdOffset + cdSize > fileSize)
    throw new VerificationError("provider_archive_invalid", "the provider archive's directory is invalid");
  const cd = readAt(fd, cdOffset, cdSize);
  const out: ZipEntry[] = [];
  let at = 0;
  for (let i = 0; i < count; i++) {
    if (cd.readUInt32LE(at) !== 0x02014b50)
      throw new VerificationError("provider_archive_invalid", "the provider archive's directory is invalid");
    const nameLength = cd.readUInt16LE(at + 28);
    const extraLength = cd.readUInt16LE(at + 30);
    const commentLength = cd.readUInt16LE(at + 32);
    out.push({
      method: cd.readUInt16LE(at + 10),
      compressedSize: cd.readUInt32LE(at + 20),
      size: cd.readUInt32LE(at + 24),
      localOffset: cd.readUInt32LE(at + 42),
      mode: (cd.readUInt32LE(at + 38) >>> 16) & 0xffff,
      name: cd.toString("utf8", at + 46, at + 46 + nameLength),
    });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return out;
}

/**
 * Unpacks a provider's zip into `dest` (which must exist and be empty): regular files and
 * directories only, every name inside `dest`, at most `maxBytes` unpacked. Executables get
 * 0555 and other files 0444, so the result is read-only from the start.
 */
export function unzipProvider(zipPath: string, dest: string, maxBytes: number): number {
  const fd = openSync(zipPath, "r");
  try {
    let total = 0;
    for (const e of entries(fd, fstatSync(fd).size)) {
      const parts = e.name.split("/");
      if (e.name.startsWith("/") || e.name.includes("\\") || parts.some((p) => p === ".." || p === ".")) {
        throw new VerificationError(
          "provider_archive_invalid",
          `the provider archive holds an unsafe name ${JSON.stringify(e.name)}`,
        );
      }
      const type = e.mode & 0o170000;
      if (e.name.endsWith("/")) {
        mkdirSync(join(dest, e.name), { recursive: true });
        continue;
      }
      if (type !== 0 && type !== 0o100000)
        throw new VerificationError(
          "provider_archive_invalid",
          `the provider archive holds ${JSON.stringify(e.name)}, which is not a regular file`,
        );
      total += e.size;
      if (total > maxBytes)
        throw new VerificationError(
          "provider_archive_invalid",
          `the provider archive unpacks to more than ${maxBytes} bytes`,
        );
      const local = readAt(fd, e.localOffset, 30);
      if (local.readUInt32LE(0) !== 0x04034b50)
        throw new VerificationError("provider_archive_invalid", "the provider archive's entries are invalid");
      const dataAt = e.localOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
      const raw = readAt(fd, dataAt, e.compressedSize);
      let data: Buffer;
      if (e.method === 0) data = raw;
      else if (e.method === 8) data = inflateRawSync(raw, { maxOutputLength: Math.max(1, e.size) });
      else
        throw new VerificationError(
          "provider_archive_invalid",
          `the provider archive uses compression method ${e.method}`,
        );
      if (data.length !== e.size)
        throw new VerificationError("provider_archive_invalid", `${e.name} in the provider archive has the wrong size`);
      const path = join(dest, e.name);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, data, { flag: "wx", mode: e.mode & 0o111 || e.mode === 0 ? 0o555 : 0o444 });
    }
    return total;
  } finally {
    closeSync(fd);
  }
}
