import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

// The layout tells the architecture: a newcomer finds a concept by its folder, and no file
// grows into several jobs at once.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const maxLines = 450;

function sources(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sources(path, out);
    else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(path);
  }
  return out;
}

/** The files at the agent's source root: the process itself, its settings, logs, metrics and health. */
const agentRoot = new Set([
  "agent.ts",
  "config.ts",
  "data-dir.ts",
  "health.ts",
  "index.ts",
  "logger.ts",
  "metrics.ts",
  "shared-settings.ts",
]);

test("packages/agent/src keeps jobs, sessions, runners and drivers in their folders, not at its root", () => {
  const dir = join(root, "packages", "agent", "src");
  const loose = readdirSync(dir).filter((name) => name.endsWith(".ts") && !agentRoot.has(name));
  assert.deepEqual(
    loose,
    [],
    "a new file goes into session/, job/, runners/, drivers/<driver>/ or net/ (or this list, if it is the process)",
  );
  for (const folder of ["session", "job", "runners", "drivers/docker", "drivers/kubernetes"]) {
    assert.ok(statSync(join(dir, folder)).isDirectory(), `packages/agent/src/${folder}/ exists`);
  }
});

test(`no source file of packages/ is over ${maxLines} lines`, () => {
  const packages = join(root, "packages");
  const long = readdirSync(packages)
    .flatMap((p) => sources(join(packages, p, "src")))
    .map((file) => ({ file: relative(root, file), lines: readFileSync(file, "utf8").split("\n").length - 1 }))
    .filter((f) => f.lines > maxLines);
  assert.deepEqual(long, [], `split these by concept (at most ${maxLines} lines each)`);
});

test("packages/protocol is the contract alone: it imports zod and Node's built-ins, nothing that runs a process", () => {
  const dir = join(root, "packages", "protocol", "src");
  const foreign = sources(dir).flatMap((file) =>
    [...readFileSync(file, "utf8").matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)]
      .map((m) => m[1]!)
      .filter((spec) => !spec.startsWith(".") && !spec.startsWith("node:") && spec !== "zod")
      .map((spec) => `${relative(root, file)}: ${spec}`),
  );
  assert.deepEqual(foreign, [], "transport, telemetry, archives and the client belong in packages/runtime");
  const manifest = JSON.parse(readFileSync(join(root, "packages", "protocol", "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
  };
  assert.deepEqual(Object.keys(manifest.dependencies ?? {}), ["zod"]);
});
