import { DroverError } from "@drover/protocol";

/*
 * SQLite (and the file system under it) failing to write: a full disk or a data directory that
 * turned read-only. SQLite rolls the transaction back, so the database stays whole; the caller
 * gets a coded error saying what the operator must fix, instead of a generic 500.
 */

const fullCodes = new Set(["SQLITE_FULL", "ENOSPC", "EDQUOT"]);
const readOnlyCodes = new Set(["EROFS", "EACCES", "EPERM"]);

/** The coded error for a storage failure, or undefined when `err` is something else. */
export function storageError(err: unknown, dataDir: string): DroverError | undefined {
  if (err instanceof DroverError || !(err instanceof Error)) return undefined;
  const code = String((err as { code?: unknown }).code ?? "");
  const detail = `${code}: ${err.message}`;
  if (fullCodes.has(code) || /database or disk is full|no space left/i.test(err.message)) {
    return new DroverError(
      "storage_full",
      `the data directory ${dataDir} is full (${detail}); free space there — nothing was written`,
      { cause: err },
    );
  }
  if (
    code.startsWith("SQLITE_READONLY") ||
    readOnlyCodes.has(code) ||
    /read-only file system|readonly database/i.test(err.message)
  ) {
    return new DroverError(
      "database_read_only",
      `the database in ${dataDir} cannot be written (${detail}); make the directory and its files writable by the server`,
      { cause: err },
    );
  }
  if (code.startsWith("SQLITE_IOERR") || code === "SQLITE_CANTOPEN") {
    // An I/O error on write is almost always one of the two above seen through the VFS layer.
    return new DroverError(
      "database_read_only",
      `writing the database in ${dataDir} failed (${detail}); check that the directory is writable and has free space`,
      { cause: err },
    );
  }
  return undefined;
}

/**
 * Whether `err` is the database refusing a duplicate of a unique column: what a check-then-
 * insert meets when a concurrent request inserted the same name in between.
 */
export function isUniqueViolation(err: unknown): boolean {
  const code = String((err as { code?: unknown } | null)?.code ?? "");
  return code === "23505" || code === "SQLITE_CONSTRAINT_UNIQUE";
}

/**
 * Whether `err` is the database refusing a row whose parent row is gone: what a write meets when
 * the workspace it writes to was deleted between the write's checks and its insert.
 */
export function isForeignKeyViolation(err: unknown): boolean {
  const code = String((err as { code?: unknown } | null)?.code ?? "");
  return code === "23503" || code === "SQLITE_CONSTRAINT_FOREIGNKEY";
}
