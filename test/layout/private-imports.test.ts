import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

// No code of ours imports a dependency's private path: a file a package does not publish can
// move or change in any release of it, patch releases included. A subpath `pkg/sub` is public
// when `./sub` is an entry of the package's `exports` map (not a null one); a package without an
// exports map publishes no folder of built or internal files (privateFolders). Read from the
// sources, so type-only imports count too; eslint's no-restricted-imports says the same in the
// editor for the common folders, and this test covers require(), import() and the rest.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The source trees checked: everything that runs or ships, tests and tools included. */
const trees = ["packages", "deploy", "tools", "test", "bench", "scripts"];
const skipped = new Set(["node_modules", "dist", "results", "charts"]);
const sourceFile = /\.(ts|mts|cts|js|mjs|cjs)$/;

/** Folders of a package without an exports map that hold its built or internal files. */
const privateFolders = new Set(["lib", "dist", "src", "build", "internal", "cjs", "esm"]);

function sources(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (skipped.has(name)) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sources(path, out);
    else if (sourceFile.test(name)) out.push(path);
  }
  return out;
}

const stringArg = (node: ts.Node | undefined): string | undefined =>
  node && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) ? node.text : undefined;

/** Whether `expr` is `require`, `require.resolve`, `createRequire(…)` or `createRequire(…).resolve`. */
function isRequire(expr: ts.Expression): boolean {
  if (ts.isIdentifier(expr)) return expr.text === "require";
  if (ts.isPropertyAccessExpression(expr) && expr.name.text === "resolve") return isRequire(expr.expression);
  return ts.isCallExpression(expr) && ts.isIdentifier(expr.expression) && expr.expression.text === "createRequire";
}

/**
 * Every module specifier a file names: `import`/`export … from`, `import "x"`, `import x = require("x")`,
 * `import("x")` (in code and in types), `require("x")`, `require.resolve("x")`,
 * `createRequire(…)("x")` and `import.meta.resolve("x")`.
 */
export function specifiers(fileName: string, text: string): string[] {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    let spec: string | undefined;
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) spec = stringArg(node.moduleSpecifier);
    else if (ts.isExternalModuleReference(node)) spec = stringArg(node.expression);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) spec = stringArg(node.argument.literal);
    else if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const metaResolve =
        ts.isPropertyAccessExpression(callee) &&
        callee.name.text === "resolve" &&
        ts.isMetaProperty(callee.expression) &&
        callee.expression.keywordToken === ts.SyntaxKind.ImportKeyword;
      if (callee.kind === ts.SyntaxKind.ImportKeyword || metaResolve || isRequire(callee))
        spec = stringArg(node.arguments[0]);
    }
    if (spec !== undefined) found.push(spec);
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

/** The package.json of `pkg` as Node finds it from `fromDir`, or undefined when it is not installed. */
function manifestOf(pkg: string, fromDir: string): { exports?: unknown } | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const path = join(dir, "node_modules", pkg, "package.json");
    if (existsSync(path)) return JSON.parse(readFileSync(path, "utf8")) as { exports?: unknown };
    if (dirname(dir) === dir) return undefined;
  }
}

/** Whether `subpath` (`./x/y`) is a non-null entry of an exports map: exact, a `*` pattern or a legacy `./dir/` folder. */
export function exportedBy(exportsField: unknown, subpath: string): boolean {
  if (typeof exportsField !== "object" || exportsField === null || Array.isArray(exportsField)) return false;
  const map = exportsField as Record<string, unknown>;
  // Only a map whose keys are subpaths publishes subpaths; one of conditions publishes ".".
  if (!Object.keys(map).every((k) => k.startsWith("."))) return false;
  if (subpath in map) return map[subpath] !== null;
  let best: { key: string; value: unknown } | undefined;
  for (const [key, value] of Object.entries(map)) {
    const star = key.indexOf("*");
    const matches =
      star >= 0
        ? subpath.startsWith(key.slice(0, star)) &&
          subpath.endsWith(key.slice(star + 1)) &&
          subpath.length >= key.length - 1
        : key.endsWith("/") && subpath.startsWith(key);
    // The longest matching key decides, as in Node's resolver (so a null pattern can hide a folder).
    if (matches && (best === undefined || key.length > best.key.length)) best = { key, value };
  }
  return best !== undefined && best.value !== null;
}

/** Why `spec`, imported from a file in `fromDir`, names a private path of a dependency; undefined when it does not. */
export function privateImport(spec: string, fromDir: string): string | undefined {
  if (spec.startsWith(".") || spec.startsWith("/") || spec.startsWith("#") || isBuiltin(spec)) return undefined;
  if (/^[a-z][a-z0-9+.-]*:/i.test(spec)) return undefined; // node:, data:, file: URLs
  const parts = spec.split("/");
  const nameLength = spec.startsWith("@") ? 2 : 1;
  const pkg = parts.slice(0, nameLength).join("/");
  const rest = parts.slice(nameLength);
  if (rest.length === 0) return undefined;
  const manifest = manifestOf(pkg, fromDir);
  if (manifest === undefined) return `${pkg} is not installed where the file is`;
  const subpath = `./${rest.join("/")}`;
  if (manifest.exports !== undefined)
    return exportedBy(manifest.exports, subpath) ? undefined : `${subpath} is not in ${pkg}'s exports map`;
  const folder = rest.find((p) => privateFolders.has(p));
  return folder === undefined ? undefined : `${pkg} has no exports map and ${folder}/ holds its private files`;
}

/** Every private import of the given files, as `file: specifier (why)`. */
export function privateImports(files: string[], resolveFrom?: string): string[] {
  return files.flatMap((file) =>
    specifiers(file, readFileSync(file, "utf8")).flatMap((spec) => {
      const why = privateImport(spec, resolveFrom ?? dirname(file));
      return why === undefined ? [] : [`${relative(root, file)}: ${spec} (${why})`];
    }),
  );
}

test("no source file imports a private path of a dependency", () => {
  const files = trees.flatMap((t) => sources(join(root, t)));
  assert.ok(files.length > 300, `the scan found ${files.length} files: it is looking in the wrong place`);
  assert.deepEqual(privateImports(files), []);
});

test("a private path is found however it is imported; public subpaths pass", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-private-imports-"));
  try {
    const planted = join(dir, "planted.ts");
    writeFileSync(
      planted,
      [
        'import "undici/lib/dispatcher/agent.js";',
        'import type { Dispatcher } from "undici/types/dispatcher";',
        'export { z } from "zod/v4/core";',
        'const a = await import("zod/src/index.js");',
        'const b = require("tar/dist/commonjs/index.js");',
        'const c = createRequire(import.meta.url)("undici/lib/api/index.js");',
        'const d = createRequire(import.meta.url).resolve("@opentelemetry/api/build/src/index.js");',
        'type E = typeof import("pino/lib/levels.js");',
        'import { request } from "undici";',
        'import { readFileSync } from "node:fs";',
        'import { x } from "./local.js";',
        "export { a, b, c, d, Dispatcher, request, readFileSync, x };",
      ].join("\n"),
    );
    assert.deepEqual(
      privateImports([planted], join(root, "packages", "protocol", "src")).map((line) => line.replace(/^[^:]+: /, "")),
      [
        "undici/lib/dispatcher/agent.js (undici has no exports map and lib/ holds its private files)",
        "zod/src/index.js (./src/index.js is not in zod's exports map)",
        "tar/dist/commonjs/index.js (./dist/commonjs/index.js is not in tar's exports map)",
        "undici/lib/api/index.js (undici has no exports map and lib/ holds its private files)",
        "@opentelemetry/api/build/src/index.js (./build/src/index.js is not in @opentelemetry/api's exports map)",
        "pino/lib/levels.js (pino has no exports map and lib/ holds its private files)",
      ],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("exports maps: exact entries, patterns and folders are public, null entries and condition-only maps are not", () => {
  const map = { ".": "./i.js", "./a": "./a.js", "./p/*": "./p/*.js", "./p/hidden/*": null, "./old/": "./old/" };
  assert.equal(exportedBy(map, "./a"), true);
  assert.equal(exportedBy(map, "./b"), false);
  assert.equal(exportedBy(map, "./p/x"), true);
  assert.equal(exportedBy(map, "./p/hidden/x"), false);
  assert.equal(exportedBy(map, "./old/f.js"), true);
  assert.equal(exportedBy({ import: "./i.mjs", require: "./i.cjs" }, "./i.mjs"), false);
  assert.equal(exportedBy("./i.js", "./i.js"), false);
  assert.equal(privateImport("@drover/agent/docker", join(root, "packages", "cli", "src")), undefined);
  assert.match(
    privateImport("@drover/agent/dist/src/agent.js", join(root, "packages", "cli", "src")) ?? "",
    /not in @drover\/agent's exports map/,
  );
});
