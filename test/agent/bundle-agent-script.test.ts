import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterEach, beforeEach, test } from "node:test";

// scripts/bundle-agent.mjs run on a tree of its own: the script finds the tree from its own
// location, so a copy of it in a temporary directory bundles that directory's fixture
// packages/cli/dist/src/program.js (which imports a module of packages/agent) with the real esbuild.

let root = "";
const write = (path: string, text: string) => {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
};
/** A CommonJS package `name` in `dir`/node_modules whose value is `value`. */
const dep = (dir: string, value: number) => {
  write(
    join(dir, "node_modules", "dep", "package.json"),
    JSON.stringify({ name: "dep", version: `${value}.0.0`, main: "index.js" }),
  );
  write(join(dir, "node_modules", "dep", "index.js"), `module.exports = ${value};\n`);
};
const bundle = () => spawnSync(process.execPath, [join(root, "scripts", "bundle-agent.mjs")], { encoding: "utf8" });
const program = join("packages", "cli", "dist", "agent-bundle", "program.js");

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "drover-bundle-script-"));
  mkdirSync(join(root, "scripts"));
  copyFileSync(resolve("scripts", "bundle-agent.mjs"), join(root, "scripts", "bundle-agent.mjs"));
  mkdirSync(join(root, "node_modules"));
  symlinkSync(resolve("node_modules", "esbuild"), join(root, "node_modules", "esbuild"));
  write(
    "packages/cli/dist/src/program.js",
    'import { value } from "../../../agent/dist/src/uses-dep.js";\nexport async function main() { process.stdout.write(`${value()}\\n`); }\n',
  );
  write("packages/agent/dist/src/uses-dep.js", 'import dep from "dep";\nexport function value() { return dep; }\n');
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

test("an external package hoisted to the root resolves alike from its importer and from the bundle: bundled, left external", () => {
  dep(".", 1);
  const r = bundle();
  assert.equal(r.status, 0, r.stderr);
  assert.match(readFileSync(join(root, program), "utf8"), /from"dep"|from "dep"/);
});

// Fails without the check: the bundle would load the root's dep (version 1) at run time where
// the agent's code was written against its own (version 2).
test("an external package the importer finds elsewhere than the bundle would (not hoisted) fails the build", () => {
  dep(".", 1);
  dep("packages/agent", 2);
  const r = bundle();
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /external "dep" resolves to .*\/packages\/agent\/node_modules\/dep\/index\.js from .*uses-dep\.js but to .*\/node_modules\/dep\/index\.js from the bundle/,
  );
});

test("an external package the bundle would not find at all fails the build", () => {
  dep("packages/agent", 2);
  const r = bundle();
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /external "dep" resolves to .*\/packages\/agent\/node_modules\/dep\/index\.js from .* but to \(not found\) from the bundle/,
  );
});

// Fails without the check: esbuild only warns, and the build went on with the bundle written.
test("a build warning fails the build and leaves no bundle", () => {
  dep(".", 1);
  write(
    "packages/agent/dist/src/uses-dep.js",
    'import dep from "dep";\nconst twice = { a: 1, a: 2 };\nexport function value() { return dep + twice.a; }\n',
  );
  const r = bundle();
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /Duplicate key "a"/);
  assert.match(r.stderr, /bundle-agent: 1 warning\(s\) above; the agent bundle is not written/);
  assert.equal(existsSync(join(root, program)), false);
});

// Fails without the script's classNames: esbuild renames the second of two same-named classes
// (`Thing2`), and a class that refers to itself becomes `Self = class _Self`: commander's classes
// and the errors pino logs (`err.type` is `constructor.name`) would read wrong.
test("classes of the same name in two modules, and a class that refers to itself, keep their names in the bundle", () => {
  write(
    "packages/agent/dist/src/a.js",
    "export class Thing {}\nexport class Self { static make() { return new Self(); } }\n",
  );
  write("packages/agent/dist/src/b.js", "export class Thing {}\n");
  write(
    "packages/cli/dist/src/program.js",
    [
      'import { Self, Thing as A } from "../../../agent/dist/src/a.js";',
      'import { Thing as B } from "../../../agent/dist/src/b.js";',
      "export async function main() { process.stdout.write(`${new A().constructor.name} ${new B().constructor.name} ${Self.make().constructor.name}\\n`); }",
      "",
    ].join("\n"),
  );
  const r = bundle();
  assert.equal(r.status, 0, r.stderr);
  const text = readFileSync(join(root, program), "utf8");
  assert.match(text, /Thing2/, "esbuild renamed one Thing (what keepNames is for)");
  assert.match(text, /class _Self/, "esbuild named the self-referencing class _Self");
  const ran = spawnSync(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      `const { main } = await import(${JSON.stringify(join(root, program))}); await main();`,
    ],
    { encoding: "utf8" },
  );
  assert.equal(ran.status, 0, ran.stderr);
  assert.equal(ran.stdout, "Thing Thing Self\n");
});

// Fails without the check: the nested class would be named `Thing2` in the bundle.
test("a renamed class whose name the script cannot give back fails the build", () => {
  write("packages/agent/dist/src/a.js", "export class Thing {}\n");
  write("packages/agent/dist/src/b.js", "export function make() {\n  class Thing {}\n  return new Thing();\n}\n");
  write(
    "packages/cli/dist/src/program.js",
    [
      'import { Thing } from "../../../agent/dist/src/a.js";',
      'import { make } from "../../../agent/dist/src/b.js";',
      "export async function main() { process.stdout.write(`${new Thing().constructor.name} ${make().constructor.name}\\n`); }",
      "",
    ].join("\n"),
  );
  const r = bundle();
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /esbuild renamed these classes and nothing gives their names back .*class Thing2/);
  assert.equal(existsSync(join(root, program)), false);
});
