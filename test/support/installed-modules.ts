import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** The text of `file` in module `key` as installed into `workDir` (through terraform's modules.json). */
export function installedModuleFile(workDir: string, key: string, file = "main.tf"): string {
  const manifest = JSON.parse(readFileSync(join(workDir, ".terraform", "modules", "modules.json"), "utf8")) as {
    Modules: Array<{ Key: string; Dir: string }>;
  };
  const entry = manifest.Modules.find((m) => m.Key === key);
  assert.ok(entry, `module ${key} is in modules.json`);
  return readFileSync(join(workDir, entry.Dir, file), "utf8");
}
