// Bundles the CLI as `drover agent run` loads it (decision 0037): one tree-shaken, minified set
// of files under packages/cli/dist/agent-bundle, built from tsc's output. `drover agent run`
// (packages/cli/src/main.ts) imports program.js from there; every other command keeps tsc's files.
//
//   node scripts/bundle-agent.mjs      (run by `npm run build` after tsc, and by the Dockerfile)
//
// Why it pays (bench/notes/issue-18.md): V8 keeps every module's source text and its records;
// ~300 small ESM files, comments included, and zod's 40 locales (loaded by any zod import, used
// by nobody here) cost an idle agent ~3 MB. What stays outside the bundle:
// - every package but zod, commander and pino: the lazily loaded ones (OpenTelemetry, the
//   Kubernetes client, tar, openpgp) stay lazy and shared with tsc's files, and undici is loaded
//   file by file at run time anyway (protocol/transport.ts);
// - @drover/server (never loaded by the agent);
// - the agent's heap-mode module: main.ts enters idle heap mode through it before the bundle
//   loads, and the agent must leave it through the same module instance.
import { build } from "esbuild";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const outdir = join(root, "packages", "cli", "dist", "agent-bundle");
const inlined = new Set(["zod", "commander", "pino"]);
const heapMode = join(root, "packages", "agent", "dist", "src", "heap-mode.js");

/** The package name of a bare specifier (`@scope/name/x` → `@scope/name`). */
const packageOf = (spec) =>
  spec
    .split("/")
    .slice(0, spec.startsWith("@") ? 2 : 1)
    .join("/");

/** Marks the plugin's own look-ups of an external, which must resolve as esbuild would. */
const probe = Symbol("probe");

/*
 * Node modules the bundled packages require when they load but use only on paths an agent
 * never or rarely takes; each is ~0.2-0.3 MB of an idle agent (SPEC §8; test/agent/lean-idle
 * fails when one loads at idle). Their stand-ins load the real module on first use.
 * - commander: node:child_process, for executable subcommands (Drover's are all in-process).
 * - pino: worker_threads for `isMainThread` (whether a non-sync destination flushes at exit)
 *   and thread-stream (transports, which the agent does not configure). The bundle runs only as
 *   `drover agent run`'s main thread (packages/cli/src/main.ts), so `isMainThread` is true.
 */
const lazyFor = { commander: ["child_process"], pino: ["worker_threads", "thread-stream"] };
const knownValues = { worker_threads: { isMainThread: true } };
/** The stand-in's source (CommonJS, as its importers are): the real module on first property read or construction. */
const standIn = (name) =>
  name === "thread-stream"
    ? `module.exports = function ThreadStream(options) { const Real = require("thread-stream"); return new Real(options); };`
    : `let real; const known = ${JSON.stringify(knownValues[name] ?? {})};
module.exports = new Proxy(known, { get: (_, key) => (key in known ? known[key] : (real ??= require("node:${name}"))[key]) });`;

/*
 * node:crypto as the Drover packages import it: its facade loads every part of Node's crypto
 * (keys, ciphers, X.509, webcrypto; ~0.4 MB of heap, ~0.75 MB RSS beside undici's modules), and
 * an idle agent hashes and draws nothing: its users (job ids, cache keys and holders, safe writes,
 * process tags) run for a job, and at start only when another agent's job runs on the host
 * (agent/orphans.ts). The stand-in loads it on the first call. An import it does not list stops the build.
 */
const lazyCrypto = ["createHash", "randomBytes", "randomUUID", "timingSafeEqual"];
const cryptoStandIn = [
  'import { createRequire } from "node:module";',
  "let real;",
  'const crypto = () => (real ??= createRequire(import.meta.url)("node:crypto"));',
  ...lazyCrypto.map((name) => `export function ${name}(...args) { return crypto().${name}(...args); }`),
].join("\n");

const jsonSchemaFiles = /\/(to-json-schema|json-schema-processors|json-schema-generator|from-json-schema)\.js$/;

/**
 * A stand-in for one of zod's JSON Schema files: the same exports, each throwing when called
 * (a class, when constructed); the `create…Method` factories, which zod calls per schema, return
 * such a function. An export this misses stops the build where zod imports it by name (esbuild:
 * no matching export) and is a build warning where zod reads it off a namespace.
 */
function jsonSchemaStub(file) {
  const source = readFileSync(file, "utf8");
  const names = new Set([...source.matchAll(/^export (?:function|const|let|class) (\w+)/gm)].map((m) => m[1]));
  for (const [, list] of source.matchAll(/^export \{([^}]*)\};/gm))
    for (const part of list.split(","))
      names.add(
        part
          .trim()
          .split(/\s+as\s+/)
          .pop(),
      );
  names.delete("");
  const lines = [
    `const unavailable = (name) => function () { throw new Error("zod's " + name + " (JSON Schema) is left out of the agent bundle (scripts/bundle-agent.mjs); it runs from tsc's files"); };`,
  ];
  for (const name of names)
    lines.push(
      /^create\w*Method$/.test(name)
        ? `export const ${name} = () => unavailable(${JSON.stringify(name)});`
        : `export const ${name} = unavailable(${JSON.stringify(name)});`,
    );
  return lines.join("\n");
}

/*
 * esbuild renames a class that shares its name with another module's (commander's `Command`
 * becomes `Command2`) and names a class that refers to itself `_X` (`X = class _X`), and pino
 * logs `err.type` from `constructor.name`. Each file's top-level classes (`class X` at the start
 * of a line: tsc's output, commander's and zod's files) get their own name back at the end of the
 * file, where no source map position moves; a renamed class this misses fails the build (below).
 */
function classNames(path) {
  const source = readFileSync(path, "utf8");
  const names = [...source.matchAll(/^(?:export (?:default )?)?class ([A-Za-z_$][\w$]*)/gm)].map((m) => m[1]);
  if (names.length === 0) return undefined;
  return {
    contents: `${source}\n${names.map((n) => `Object.defineProperty(${n}, "name", { value: ${JSON.stringify(n)}, configurable: true });`).join("\n")}\n`,
    loader: "js",
  };
}

/** A file of the three bundled Drover packages (tsc's output). */
const droverFile = /[\\/]packages[\\/](agent|protocol|cli)[\\/]dist[\\/]/;

const drover = {
  name: "drover-agent-bundle",
  setup(b) {
    b.onResolve({ filter: /^(node:)?(child_process|worker_threads)$|^thread-stream$/ }, (a) => {
      const name = a.path.replace(/^node:/, "");
      if (a.namespace === "lazy") return { path: a.path, external: true };
      const importer = Object.keys(lazyFor).find(
        (pkg) => a.importer.includes(`${join("node_modules", pkg)}/`) && lazyFor[pkg].includes(name),
      );
      return importer ? { path: name, namespace: "lazy" } : undefined;
    });
    b.onLoad({ filter: /.*/, namespace: "lazy" }, (a) => ({ contents: standIn(a.path), loader: "js" }));
    b.onLoad({ filter: /\.(c|m)?js$/, namespace: "file" }, (a) => classNames(a.path));
    b.onResolve({ filter: /^(node:)?crypto$/ }, (a) =>
      droverFile.test(a.importer) ? { path: "node:crypto", namespace: "lazy-crypto" } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: "lazy-crypto" }, () => ({ contents: cryptoStandIn, loader: "js" }));
    // zod's JSON Schema code (~100 KB of source: zod → JSON Schema, JSON Schema → zod), which
    // every zod schema links to but only z.toJSONSchema, z.fromJSONSchema and `~standard`'s
    // jsonSchema run: nothing in the agent does (the server's OpenAPI document is not bundled).
    b.onResolve({ filter: jsonSchemaFiles }, (a) =>
      a.importer.includes(`${join("node_modules", "zod")}/`)
        ? { path: join(a.resolveDir, a.path), namespace: "zod-json-schema" }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: "zod-json-schema" }, (a) => ({
      contents: jsonSchemaStub(a.path),
      loader: "js",
    }));
    // zod's `locales` namespace (its error messages in 40 languages); zod itself imports only
    // `locales/en.js` directly, which stays.
    b.onResolve({ filter: /\/locales\/index\.js$/ }, (a) =>
      a.importer.includes(`${join("node_modules", "zod")}`) ? { path: "zod-locales", namespace: "empty" } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: "empty" }, () => ({ contents: "export {};", loader: "js" }));
    b.onResolve({ filter: /heap-mode(\.js)?$/ }, async (a) => {
      if (a.path === "@drover/agent/heap-mode") return { path: a.path, external: true };
      const at = join(a.resolveDir, a.path);
      return at === heapMode ? { path: "@drover/agent/heap-mode", external: true } : undefined;
    });
    b.onResolve({ filter: /^[^./]/ }, async (a) => {
      if (a.path.startsWith("node:")) return { external: true };
      if (a.pluginData === probe) return undefined;
      const pkg = packageOf(a.path);
      if ((pkg.startsWith("@drover/") && pkg !== "@drover/server") || inlined.has(pkg)) return undefined;
      // An external is looked up at run time from the bundle's directory, not from the file that
      // imports it: the two agree only while the package is hoisted. Refuse when they differ.
      const at = async (resolveDir) => {
        const r = await b.resolve(a.path, { kind: a.kind, resolveDir, pluginData: probe });
        return r.errors.length > 0 ? "(not found)" : r.path;
      };
      const [fromImporter, fromBundle] = await Promise.all([at(a.resolveDir), at(dirname(outdir))]);
      if (fromImporter !== fromBundle) {
        return {
          errors: [
            {
              text: `external "${a.path}" resolves to ${fromImporter} from ${a.importer} but to ${fromBundle} from the bundle (${outdir}): hoist it (npm ci) or bundle it`,
            },
          ],
        };
      }
      return { path: a.path, external: true };
    });
  },
};

rmSync(outdir, { recursive: true, force: true });
const result = await build({
  entryPoints: { program: join(root, "packages", "cli", "dist", "src", "program.js") },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // Whitespace and syntax only: names stay, so stack traces and `constructor.name` read as in
  // the source; the .map files give the source positions (`node --enable-source-maps`).
  minifyWhitespace: true,
  minifySyntax: true,
  // Not esbuild's keepNames: it wraps every named function in `__name(fn, "name")`, and each
  // closure made at run time (zod makes several per schema) then holds a property store of its
  // own (~0.6-0.8 MB of an idle agent, bench/notes/issue-18.md). Classes keep their names through
  // the plugin's `classNames` instead; a function esbuild renamed reads renamed in a stack trace.
  keepNames: false,
  // One-byte source strings: V8 keeps a file's source as UTF-16 when it holds any non-ASCII character.
  charset: "ascii",
  legalComments: "none",
  sourcemap: "linked",
  logLevel: "warning",
  plugins: [drover],
  // Bundled CommonJS (commander, pino) calls require for Node's own modules.
  banner: {
    js: 'import { createRequire as __droverCreateRequire } from "node:module"; const require = __droverCreateRequire(import.meta.url);',
  },
});
// A warning is a build fault here: e.g. an import the bundle cannot follow would fail only when
// the agent reaches it. Remove the bundle so `drover agent run` says it is not built.
if (result.warnings.length > 0) {
  rmSync(outdir, { recursive: true, force: true });
  process.stderr.write(`bundle-agent: ${result.warnings.length} warning(s) above; the agent bundle is not written\n`);
  process.exit(1);
}

// A class esbuild renamed (`X2 = class`, `class X2`) or named `_X` whose name no classNames
// statement gives back: its `constructor.name` would read wrong.
const renamedClasses = [];
for (const f of readdirSync(outdir).filter((name) => name.endsWith(".js"))) {
  const text = readFileSync(join(outdir, f), "utf8");
  for (const m of text.matchAll(/([\w$]+)=class _[\w$]+|([\w$]+\d)=class\b|\bclass ([\w$]+\d)\b/g)) {
    const binding = m[1] ?? m[2] ?? m[3];
    if (!text.includes(`defineProperty(${binding},"name"`)) renamedClasses.push(`${f}: ${m[0]}`);
  }
}
if (renamedClasses.length > 0) {
  rmSync(outdir, { recursive: true, force: true });
  process.stderr.write(
    `bundle-agent: esbuild renamed these classes and nothing gives their names back (declare them at the start of a line, or rename one of the two): ${renamedClasses.join(", ")}; the agent bundle is not written\n`,
  );
  process.exit(1);
}
