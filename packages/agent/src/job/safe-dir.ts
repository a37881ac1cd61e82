import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { randomBytes } from "node:crypto";
import { isAbsolute, relative, sep } from "node:path";

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = constants;

/** A path below a SafeDir that is a link, not what was expected, or names something outside it. */
export class UnsafePathError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`refused ${path}: ${why} (a run may have planted it; nothing was read or written through it)`);
  }
}

const errno = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code;

/**
 * A directory held open by a file descriptor, below which names resolve one component at a
 * time and never through a symbolic link. A run container that shares the directory can
 * rename, replace or plant links anywhere in it; every operation here then either acts on
 * what this process created or fails — it never reaches another file of this process's
 * filesystem. Linux only: `/proc/self/fd/<fd>/<name>` stands in for openat(2), which Node
 * does not offer; the kernel resolves `<name>` inside the directory the descriptor holds,
 * wherever it has been moved since.
 */
export class SafeDir {
  private closed = false;

  private constructor(
    /** The descriptor of the directory itself. */
    readonly fd: number,
    /** A path for messages (the directory as it was named when opened). */
    readonly label: string,
  ) {}

  /**
   * Opens a directory whose path the operator chose; its last component must be a real
   * directory, not a link. `create` makes it (and missing parents) first.
   */
  static open(path: string, options: { create?: boolean } = {}): SafeDir {
    if (options.create) mkdirSync(path, { recursive: true });
    return new SafeDir(openDir(path, path), path);
  }

  /** A path the kernel resolves inside this directory, for one component `name`. */
  at(name: string): string {
    if (this.closed) throw new Error(`${this.label} was closed`);
    if (!name || name === "." || name === ".." || name.includes("/") || name.includes("\0"))
      throw new UnsafePathError(`${this.label}/${name}`, "not a plain file name");
    return `/proc/self/fd/${this.fd}/${name}`;
  }

  /** The path through this directory's descriptor, for tools that take a directory path. */
  get procPath(): string {
    if (this.closed) throw new Error(`${this.label} was closed`);
    return `/proc/self/fd/${this.fd}`;
  }

  /**
   * Opens the directory `rel` below this one (components separated by "/"), each component
   * a real directory. `create: "missing"` makes absent ones; `create: "fresh"` requires the
   * last one to be new, so nothing could have been planted in it beforehand.
   */
  dir(rel: string, options: { create?: "missing" | "fresh" } = {}): SafeDir {
    const parts = components(rel);
    // Each step opens the next component through the previous handle, then drops that one.
    let current = new SafeDir(openDir(`${this.procPath}/.`, this.label), this.label);
    for (const [i, part] of parts.entries()) {
      try {
        if (options.create) {
          try {
            mkdirSync(current.at(part), 0o755);
          } catch (err) {
            if (errno(err) !== "EEXIST") throw err;
            if (options.create === "fresh" && i === parts.length - 1)
              throw new UnsafePathError(`${current.label}/${part}`, "it already exists but must be new");
          }
        }
        const label = `${current.label}/${part}`;
        const next = new SafeDir(openDir(current.at(part), label), label);
        current.close();
        current = next;
      } catch (err) {
        current.close();
        throw err;
      }
    }
    return current;
  }

  /** Runs `fn` with the parent directory of `rel` open and the last component's name. */
  private inParent<T>(rel: string, fn: (parent: SafeDir, name: string) => T, create = false): T {
    const parts = components(rel);
    const name = parts.pop()!;
    if (parts.length === 0) return fn(this, name);
    const parent = this.dir(parts.join("/"), create ? { create: "missing" } : {});
    try {
      return fn(parent, name);
    } finally {
      parent.close();
    }
  }

  /** Reads the regular file `rel`; undefined when it does not exist. Links, FIFOs and devices are refused. */
  read(rel: string): Buffer | undefined {
    const fd = this.openFile(rel);
    if (fd === undefined) return undefined;
    try {
      const parts: Buffer[] = [];
      const buf = Buffer.alloc(256 * 1024);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n <= 0) break;
        parts.push(Buffer.from(buf.subarray(0, n)));
      }
      return Buffer.concat(parts);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Reads the regular file `rel` from byte `offset` on, handing each chunk to `onChunk`;
   * returns the offset after the last byte read (unchanged when the file does not exist).
   */
  readFrom(rel: string, offset: number, onChunk: (chunk: Buffer) => void): number {
    const fd = this.openFile(rel);
    if (fd === undefined) return offset;
    try {
      const buf = Buffer.alloc(256 * 1024);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, offset);
        if (n <= 0) break;
        offset += n;
        onChunk(Buffer.from(buf.subarray(0, n)));
      }
      return offset;
    } finally {
      closeSync(fd);
    }
  }

  private openFile(rel: string): number | undefined {
    return this.inParent(rel, (parent, name) => {
      let fd: number;
      try {
        // O_NONBLOCK: a FIFO planted here must not hang this process in open().
        fd = openSync(parent.at(name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
      } catch (err) {
        if (errno(err) === "ENOENT") return undefined;
        if (errno(err) === "ELOOP") throw new UnsafePathError(`${parent.label}/${name}`, "it is a symbolic link");
        throw err;
      }
      if (!fstatSync(fd).isFile()) {
        closeSync(fd);
        throw new UnsafePathError(`${parent.label}/${name}`, "it is not a regular file");
      }
      return fd;
    });
  }

  /**
   * Writes `rel` whole: a new temporary file (O_EXCL, no links followed) renamed over the
   * name, so a link planted at the name is replaced, never written through. Missing parent
   * directories are created.
   */
  write(rel: string, data: string | Buffer, mode = 0o644): void {
    this.inParent(
      rel,
      (parent, name) => {
        const tmp = `.${name}.${randomBytes(6).toString("hex")}.tmp`;
        const fd = openSync(parent.at(tmp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
        try {
          const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
          let done = 0;
          while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
          fchmodSync(fd, mode);
        } finally {
          closeSync(fd);
        }
        try {
          renameSync(parent.at(tmp), parent.at(name));
        } catch (err) {
          unlinkSync(parent.at(tmp));
          throw err;
        }
      },
      true,
    );
  }

  /** Makes `rel` a new symbolic link to `target` (never replacing anything); missing parent directories are created. */
  link(rel: string, target: string): void {
    this.inParent(rel, (parent, name) => symlinkSync(target, parent.at(name)), true);
  }

  /** Whether `rel` exists (as anything, links included: nothing is followed). */
  exists(rel: string): boolean {
    return this.lstat(rel) !== undefined;
  }

  /** The modification time of `rel` itself (a link's own, never its target's); undefined when absent. */
  mtimeMs(rel: string): number | undefined {
    return this.lstat(rel)?.mtimeMs;
  }

  private lstat(rel: string) {
    try {
      return this.inParent(rel, (parent, name) => lstatSync(parent.at(name)));
    } catch (err) {
      if (errno(err) === "ENOENT") return undefined;
      throw err;
    }
  }

  /**
   * Removes the entry `name` of this directory and, for a directory, everything in it.
   * Only for directories no other process writes to any more (a finished run's): the
   * recursive walk does not guard against entries swapped while it runs.
   */
  remove(name: string): void {
    rmSync(this.at(name), { recursive: true, force: true });
  }

  /** Closes the descriptor; later calls on this object throw. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }
}

/** Opens a directory without following a link at its last component. */
function openDir(path: string, label: string): number {
  try {
    return openSync(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  } catch (err) {
    if (errno(err) === "ELOOP") throw new UnsafePathError(label, "it is a symbolic link");
    if (errno(err) === "ENOTDIR") throw new UnsafePathError(label, "it is not a directory");
    throw err;
  }
}

/** The components of a relative path below a SafeDir; "..", "." and empty ones are refused. */
function components(rel: string): string[] {
  const parts = rel.split("/");
  if (isAbsolute(rel) || parts.some((p) => !p || p === "." || p === ".."))
    throw new UnsafePathError(rel, "not a plain relative path");
  return parts;
}

/** `path` relative to `base`, for paths the caller built below it; anything else is refused. */
export function below(base: string, path: string): string {
  const rel = relative(base, path);
  if (!rel || rel.startsWith("..") || isAbsolute(rel)) throw new UnsafePathError(path, `not below ${base}`);
  return rel.split(sep).join("/");
}
