import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const made: string[] = [];

/** A new directory under the system's temp directory, removed when this test file's process exits. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (made.length === 0)
    process.once("exit", () => {
      for (const d of made) rmSync(d, { recursive: true, force: true });
    });
  made.push(dir);
  return dir;
}
