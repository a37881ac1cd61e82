// `helm template` for the tests, rendered once per chart contents and arguments: the chart tests
// ask for the same few value sets again and again (within a file and across files), and each
// helm process costs a few hundred milliseconds of CPU on a 2-core machine that runs three
// test files at once. Renders are kept in this process and on disk under test/dist (build
// output), keyed by a hash of charts/, of helm's binary path, of the arguments and of every
// file an argument names, so an edited chart or values file is rendered afresh.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const cacheDir = join(repo, "test", "dist", ".helm-renders");

const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string };
};

/** The helm binary the tests run. */
export const helm = tools().helm;

let chartsHash: string | undefined;

/** A hash of every file under charts/ (a chart may read a sibling library chart or shared files). */
function hashCharts(): string {
  if (chartsHash) return chartsHash;
  const h = createHash("sha256");
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else h.update(`${path}\0`).update(readFileSync(path)).update("\0");
    }
  };
  walk(join(repo, "charts"));
  chartsHash = h.digest("hex");
  return chartsHash;
}

/** Arguments that name a file helm reads: its contents are part of the render's key. */
const fileFlags = new Set(["-f", "--values", "--set-file"]);

function renderKey(args: string[]): string {
  const h = createHash("sha256")
    .update(hashCharts())
    .update(`\0${helm}\0${JSON.stringify(args)}`);
  args.forEach((arg, i) => {
    const next = args[i + 1];
    if (!fileFlags.has(arg) || next === undefined) return;
    // --set-file takes name=path pairs, comma-separated; -f a path.
    const paths = arg === "--set-file" ? next.split(",").map((p) => p.slice(p.indexOf("=") + 1)) : [next];
    for (const p of paths) h.update(`\0${p}\0`).update(existsSync(p) ? readFileSync(p) : "(missing)");
  });
  return h.digest("hex");
}

const renders = new Map<string, string>();

/** Where the render of `args` is kept on disk, once rendered. */
export function keptRender(args: string[]): string {
  return keptRenderFile(renderKey(args));
}

const keptRenderFile = (key: string) => join(cacheDir, `${key}.yaml`);

/**
 * `helm <args>` (a `template` command line) and its stdout. Throws as execFileSync does when
 * helm fails; a failed render is never kept. `fresh`: run helm whatever is kept (a test of
 * what two renders share).
 */
export function helmTemplate(args: string[], opts: { fresh?: boolean } = {}): string {
  const key = renderKey(args);
  const kept = opts.fresh ? undefined : renders.get(key);
  if (kept !== undefined) return kept;
  const file = keptRenderFile(key);
  let out: string;
  if (!opts.fresh && existsSync(file)) out = readFileSync(file, "utf8");
  else {
    out = execFileSync(helm, args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
    mkdirSync(cacheDir, { recursive: true });
    // Written aside then renamed: a file running at the same time reads a whole render or none.
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, out);
    renameSync(tmp, file);
  }
  renders.set(key, out);
  return out;
}
