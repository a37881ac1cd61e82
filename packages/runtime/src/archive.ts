import { createGunzip } from "node:zlib";
import { DroverError } from "@drover/protocol";
import { checkLinks, type Entry, type EntryType } from "./archive-links.js";

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

/** Zero padding tolerated after the end-of-archive marker (tar pads to its record size, 10 KiB by default). */
export const maxTrailingZeroBytes = 64 * 1024;
/** Largest pax or GNU long-name header body; real ones hold a path or two. */
const maxMetaBytes = 64 * 1024;
/** How long one archive check may take before the archive is refused. */
export const defaultArchiveCheckMs = 30_000;

/**
 * Why one archive path is unsafe, or undefined when it stays inside the root. Paths are Linux
 * paths: "/" is the only separator and "\\" an ordinary character. What the unpacker (node-tar)
 * would rewrite or refuse is refused here too, so that the check and the unpacking never
 * disagree about a name: a Windows root (`C:`, a leading "\\"), which it strips, and a ".."
 * between backslashes, which it refuses.
 */
export function unsafePathReason(path: string): string | undefined {
  if (path.includes("\0")) return "contains a NUL byte";
  if (path.startsWith("/")) return "is an absolute path";
  if (/^[A-Za-z]:/.test(path) || path.startsWith("\\")) return "is a Windows-style absolute path";
  if (path.split("/").includes("..")) return "climbs out of the archive root with '..'";
  if (path.split(/[\\/]/).includes("..")) return "holds '..' between backslashes, which the unpacker refuses";
  return undefined;
}

/** What an accepted archive holds. */
export interface ArchiveSummary {
  entries: number;
  unpackedBytes: number;
  /** Paths of its files and links (what `configurationFiles` looks through). */
  files: string[];
}

/** Files terraform and tofu read as configuration: a directory without one has nothing to plan. */
export const configurationFileSuffixes = [".tf", ".tf.json", ".tofu", ".tofu.json"] as const;

/**
 * The configuration files directly in `dir` (relative, "" for the root) among `paths`. A run of a
 * directory without any would plan to destroy everything the workspace manages.
 */
export function configurationFiles(paths: readonly string[], dir: string): string[] {
  const prefix = dir.replace(/^\.?\/+|\/+$/g, "").replace(/^\.$/, "");
  return paths.filter((p) => {
    const clean = p.replace(/^\.\//, "");
    const slash = clean.lastIndexOf("/");
    const parent = slash < 0 ? "" : clean.slice(0, slash);
    const name = clean.slice(slash + 1);
    return parent === prefix && configurationFileSuffixes.some((suffix) => name.endsWith(suffix) && name !== suffix);
  });
}

const typeByFlag: Record<string, EntryType> = {
  "0": "File",
  "\0": "File",
  "7": "File",
  "1": "Link",
  "2": "SymbolicLink",
  "5": "Directory",
};
const typeNames: Record<string, string> = { "3": "CharacterDevice (device)", "4": "BlockDevice (device)", "6": "FIFO" };

const invalid = (message: string) => new DroverError("invalid_archive", message);

function field(block: Buffer, offset: number, length: number): string {
  const raw = block.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end < 0 ? raw.length : end).toString("utf8");
}

function numeric(block: Buffer, offset: number, length: number): number {
  const first = block[offset] ?? 0;
  if (first & 0x80) {
    // GNU base-256: big-endian, high bit of the first byte set. Only non-negative sizes make sense.
    if (first & 0x40) return Number.NaN;
    let n = first & 0x3f;
    for (let i = offset + 1; i < offset + length; i++) n = n * 256 + (block[i] ?? 0);
    return n;
  }
  const text = field(block, offset, length).trim();
  if (text === "") return 0;
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : Number.NaN;
}

function checksumOk(block: Buffer): boolean {
  const stored = numeric(block, 148, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < 512; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : (block[i] ?? 0);
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return stored === unsigned || stored === signed;
}

/** The records of a pax extended header (`<len> key=value\n` …). */
function paxRecords(body: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let at = 0;
  while (at < body.length) {
    const space = body.indexOf(0x20, at);
    if (space < 0) break;
    const len = Number(body.subarray(at, space).toString("ascii"));
    if (!Number.isInteger(len) || len <= space - at || at + len > body.length)
      throw invalid("the archive has a malformed pax header");
    const record = body.subarray(space + 1, at + len - 1).toString("utf8");
    const eq = record.indexOf("=");
    if (eq > 0) out.set(record.slice(0, eq), record.slice(eq + 1));
    at += len;
  }
  return out;
}

/**
 * A tar reader over a byte stream that keeps at most one header (or one small pax body) in
 * memory, skips file contents without copying them, and throws at the first problem.
 */
class TarWalker {
  readonly entries: Entry[] = [];
  unpackedBytes = 0;
  private readonly block = Buffer.alloc(512);
  private blockFill = 0;
  private skip = 0;
  private meta: { kind: string; body: Buffer; fill: number; padding: number } | undefined;
  private pax = new Map<string, string>();
  private globalPax = new Map<string, string>();
  private longName: string | undefined;
  private longLink: string | undefined;
  private zeroBlocks = 0;
  private ended = false;
  private trailing = 0;

  constructor(private readonly limits: ArchiveLimits) {}

  push(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.ended) {
        // Only zero padding may follow the end marker, and only a little of it.
        const rest = chunk.subarray(i);
        this.trailing += rest.length;
        if (this.trailing > maxTrailingZeroBytes || rest.some((b) => b !== 0)) {
          throw invalid("the archive has data after its end-of-archive marker; upload a plain tar.gz of the directory");
        }
        return;
      }
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i);
        this.skip -= n;
        i += n;
        continue;
      }
      if (this.meta) {
        const m = this.meta;
        const n = Math.min(m.body.length - m.fill, chunk.length - i);
        chunk.copy(m.body, m.fill, i, i + n);
        m.fill += n;
        i += n;
        if (m.fill === m.body.length) {
          this.meta = undefined;
          this.skip = m.padding;
          this.takeMeta(m.kind, m.body);
        }
        continue;
      }
      const n = Math.min(512 - this.blockFill, chunk.length - i);
      chunk.copy(this.block, this.blockFill, i, i + n);
      this.blockFill += n;
      i += n;
      if (this.blockFill === 512) {
        this.blockFill = 0;
        this.header(this.block);
      }
    }
  }

  /** Called when the stream ends: the archive must have ended cleanly. */
  finish(): void {
    if (this.blockFill !== 0 || this.skip > 0 || this.meta) throw invalid("the archive is truncated");
    if (this.entries.length === 0 && this.zeroBlocks === 0) throw invalid("the archive is empty");
  }

  private header(block: Buffer): void {
    if (block.every((b) => b === 0)) {
      this.zeroBlocks++;
      if (this.zeroBlocks === 2) this.ended = true;
      return;
    }
    if (this.zeroBlocks > 0) throw invalid("the archive is corrupt: a header follows an end-of-archive block");
    if (!checksumOk(block)) throw invalid("the archive is corrupt: a header checksum does not match");
    const flag = String.fromCharCode(block[156] ?? 0);
    const size = numeric(block, 124, 12);
    if (!Number.isSafeInteger(size) || size < 0) throw invalid("the archive is corrupt: an entry has an invalid size");
    const padding = (512 - (size % 512)) % 512;
    if (flag === "x" || flag === "g" || flag === "L" || flag === "K") {
      if (size > maxMetaBytes)
        throw new DroverError(
          "payload_too_large",
          `the archive has a ${size}-byte extended header; the limit is ${maxMetaBytes}`,
        );
      this.meta = { kind: flag, body: Buffer.alloc(size), fill: 0, padding };
      if (size === 0) {
        this.meta = undefined;
        this.skip = padding;
        this.takeMeta(flag, Buffer.alloc(0));
      }
      return;
    }
    const magic = field(block, 257, 6);
    const name = field(block, 0, 100);
    const prefix = magic.startsWith("ustar") ? field(block, 345, 155) : "";
    const pax = new Map([...this.globalPax, ...this.pax]);
    const path = pax.get("path") ?? this.longName ?? (prefix ? `${prefix}/${name}` : name);
    const linkpath = pax.get("linkpath") ?? this.longLink ?? field(block, 157, 100);
    const paxSize = pax.get("size");
    const realSize = paxSize !== undefined ? Number(paxSize) : size;
    this.pax = new Map();
    this.longName = undefined;
    this.longLink = undefined;
    if (!Number.isSafeInteger(realSize) || realSize < 0)
      throw invalid(`archive entry ${JSON.stringify(path)} has an invalid size`);

    const type = typeByFlag[flag];
    if (!type) {
      const what = typeNames[flag] ?? `entry of type ${JSON.stringify(flag)}`;
      throw invalid(
        `archive entry ${JSON.stringify(path)} is a ${what}; only files, directories and links are allowed`,
      );
    }
    const reason = unsafePathReason(path);
    if (reason) throw invalid(`archive entry ${JSON.stringify(path)} ${reason}`);
    if (path.replace(/\/+$/, "") === "" || path.replace(/\/+$/, "") === ".") {
      if (type !== "Directory") throw invalid(`archive entry ${JSON.stringify(path)} replaces the archive root`);
    }
    // Only files carry data; a size on anything else would make readers disagree about where the next header is.
    if (type !== "File" && realSize !== 0)
      throw invalid(`archive entry ${JSON.stringify(path)} is a ${type} with a size; the archive is corrupt`);
    if (type === "SymbolicLink" || type === "Link") {
      if (
        linkpath === "" ||
        linkpath.includes("\0") ||
        linkpath.startsWith("/") ||
        /^[A-Za-z]:/.test(linkpath) ||
        linkpath.startsWith("\\")
      ) {
        throw invalid(
          `archive link ${JSON.stringify(path)} points to ${JSON.stringify(linkpath)}, outside the archive`,
        );
      }
      // The unpacker refuses any ".." in a hard link's target.
      const hardReason = type === "Link" ? unsafePathReason(linkpath) : undefined;
      if (hardReason) {
        const what = `archive hard link ${JSON.stringify(path)} points to ${JSON.stringify(linkpath)}`;
        throw invalid(`${what}, outside the archive: it ${hardReason}`);
      }
    }
    this.entries.push({ path, type, linkpath });
    if (this.entries.length > this.limits.maxEntries)
      throw new DroverError("payload_too_large", `the archive holds more than ${this.limits.maxEntries} entries`);
    this.unpackedBytes += realSize;
    if (this.unpackedBytes > this.limits.maxUnpackedBytes) {
      throw new DroverError(
        "payload_too_large",
        `the archive unpacks to more than ${this.limits.maxUnpackedBytes} bytes`,
      );
    }
    this.skip = realSize + ((512 - (realSize % 512)) % 512);
  }

  private takeMeta(kind: string, body: Buffer): void {
    if (kind === "x") this.pax = paxRecords(body);
    else if (kind === "g") for (const [k, v] of paxRecords(body)) this.globalPax.set(k, v);
    else {
      const end = body.indexOf(0);
      const text = body.subarray(0, end < 0 ? body.length : end).toString("utf8");
      if (kind === "L") this.longName = text;
      else this.longLink = text;
    }
  }
}

/**
 * Checks a tar.gz completely before anything is stored or extracted: every path relative and
 * inside the root, links resolving inside it through the archive's own links, no devices or
 * FIFOs, sizes within limits, nothing but zero padding after the end marker. The archive is
 * inflated as a stream (zlib works off the event loop) and the check stops at the first
 * problem, after `timeoutMs`, or when `signal` aborts. `archive` is the bytes, or the bytes in
 * pieces (a file being read), so that a large upload is checked without holding it in memory.
 * Throws DroverError("invalid_archive" | "payload_too_large") naming the first bad entry.
 */
export async function inspectArchive(
  archive: Buffer | AsyncIterable<Uint8Array>,
  limits: ArchiveLimits = defaultArchiveLimits,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<ArchiveSummary> {
  const tooLarge = (size: number) =>
    new DroverError("payload_too_large", `the archive is ${size} bytes; the limit is ${limits.maxCompressedBytes}`);
  const notGzip = () => invalid("the upload is not a gzip-compressed tar archive (tar.gz)");
  if (Buffer.isBuffer(archive)) {
    if (archive.length > limits.maxCompressedBytes) throw tooLarge(archive.length);
    if (archive.length < 2 || archive[0] !== 0x1f || archive[1] !== 0x8b) throw notGzip();
  }
  const walker = new TarWalker(limits);
  const timeoutMs = options.timeoutMs ?? defaultArchiveCheckMs;
  await new Promise<void>((resolve, reject) => {
    const gunzip = createGunzip();
    let settled = false;
    const done = (err?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      if (err) {
        gunzip.destroy();
        reject(err instanceof Error ? err : new Error(String(err)));
      } else resolve();
    };
    const timer = setTimeout(
      () => done(invalid(`checking the archive took longer than ${timeoutMs} ms; upload a smaller configuration`)),
      timeoutMs,
    );
    timer.unref();
    const onAbort = () => done(options.signal?.reason ?? new Error("aborted"));
    options.signal?.addEventListener("abort", onAbort, { once: true });
    gunzip.on("data", (chunk: Buffer) => {
      if (settled) return;
      try {
        walker.push(chunk);
      } catch (err) {
        done(err);
      }
    });
    gunzip.on("error", (err) => done(invalid(`the archive is corrupt: ${err.message}`)));
    gunzip.on("end", () => {
      try {
        walker.finish();
        checkLinks(walker.entries);
        done();
      } catch (err) {
        done(err);
      }
    });
    if (Buffer.isBuffer(archive)) {
      gunzip.end(archive);
      return;
    }
    void (async () => {
      let size = 0;
      let head = Buffer.alloc(0);
      for await (const piece of archive) {
        if (settled) return;
        size += piece.length;
        if (size > limits.maxCompressedBytes) return done(tooLarge(size));
        if (head.length < 2) {
          head = Buffer.concat([head, piece]);
          if (head.length >= 2 && (head[0] !== 0x1f || head[1] !== 0x8b)) return done(notGzip());
        }
        // Backpressure: zlib inflates this piece before the next one is read (or the check ends).
        if (!gunzip.write(piece)) {
          await new Promise<void>((resume) => {
            const go = () => {
              gunzip.off("drain", go);
              gunzip.off("close", go);
              resume();
            };
            gunzip.on("drain", go);
            gunzip.on("close", go);
          });
        }
      }
      if (settled) return;
      if (head.length < 2) return done(notGzip());
      gunzip.end();
    })().catch(done);
  });
  return {
    entries: walker.entries.length,
    unpackedBytes: walker.unpackedBytes,
    files: walker.entries.filter((e) => e.type !== "Directory").map((e) => e.path),
  };
}
