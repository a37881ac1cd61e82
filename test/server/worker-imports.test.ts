import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

/*
 * The server starts a worker thread for every uploaded plan JSON and one per SQLite database.
 * Each thread loads its modules anew: a thread that imported a package's index (all of
 * @drover/protocol's schemas and routes, undici, …) spent ~0.5 s of CPU on every plan before
 * doing any work. Loaded here on a main thread, each worker file stops at its first statement
 * (it is not in a worker) after its imports ran; the watch records every module they resolved.
 */

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
const watchModule = join(repo, "test", "dist", "support", "module-watch.js");
const serverDist = join(repo, "packages", "server", "dist", "src");

/** The module URLs `file` resolves, with their imports, when loaded as a program. */
function modulesLoadedBy(file: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), "drover-worker-imports-"));
  try {
    const log = join(dir, "modules.log");
    const run = spawnSync(process.execPath, [`--import=${watchModule}`, file], {
      env: { ...process.env, DROVER_TEST_MODULE_LOG: log },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.match(run.stderr, /runs as a worker thread/, "the file ran up to its own check");
    return existsSync(log) ? readFileSync(log, "utf8").split("\n").filter(Boolean) : [];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The third-party packages among `urls`, by name. */
function packagesOf(urls: string[]): string[] {
  const names = new Set<string>();
  for (const url of urls) {
    const m = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
    if (m) names.add(m[1] as string);
  }
  return [...names].sort();
}

/** Our own modules among `urls`, relative to packages/. */
function ownModulesOf(urls: string[]): string[] {
  const prefix = `${pathToFileURL(join(repo, "packages")).href}/`;
  return urls.filter((u) => u.startsWith(prefix)).map((u) => u.slice(prefix.length));
}

test("a plan JSON's worker thread loads only the modules it uses", () => {
  const urls = modulesLoadedBy(join(serverDist, "store", "plan-json-worker.js"));
  assert.deepEqual(packagesOf(urls), [], "no third-party package");
  assert.deepEqual(ownModulesOf(urls).sort(), [
    "protocol/dist/src/errors.js",
    "protocol/dist/src/plan.js",
    "runtime/dist/src/redact.js",
    "server/dist/src/store/plan-json-worker.js",
  ]);
});

test("the SQLite checkpoint thread loads only the modules it uses", () => {
  const urls = modulesLoadedBy(join(serverDist, "db", "checkpoint-worker.js"));
  assert.deepEqual(packagesOf(urls), ["better-sqlite3"]);
  assert.deepEqual(ownModulesOf(urls).sort(), [
    "protocol/dist/src/errors.js",
    "server/dist/src/db/checkpoint-worker.js",
  ]);
});
