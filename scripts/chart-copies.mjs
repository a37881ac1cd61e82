// Writes the copies of what the charts and the Pulumi component share, from their one source:
// - the AgentTask CRD (deploy/kubernetes/agenttasks.drover.dev.yaml) into each controller chart's
//   crds/ and into deploy/pulumi/crds/ (the component reads it at run time);
// - the library chart charts/drover-common into charts/<chart>/charts/ of every chart that depends
//   on it, so `helm template charts/<chart>` works on a fresh clone without `helm dependency build`.
// Copies, not symlinks: Helm logs every symlink it follows, npm pack leaves them out, and a clone
// without symlink support would hold a path instead of the file. `--check` exits 1 when a copy
// differs instead of writing. The repository is the working directory.
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { parse } from "yaml";

const root = process.cwd();
const crd = "deploy/kubernetes/agenttasks.drover.dev.yaml";
const library = "charts/drover-common";

/** Every copy: its source and where it goes (files or directories). */
function copies() {
  const list = [{ from: crd, to: ["deploy/pulumi/crds/agenttasks.drover.dev.yaml"] }];
  const charts = readdirSync(join(root, "charts")).filter((c) => existsSync(join(root, "charts", c, "Chart.yaml")));
  for (const chart of charts) {
    const meta = parse(readFileSync(join(root, "charts", chart, "Chart.yaml"), "utf8"));
    if (meta.type === "library") continue;
    if ((meta.dependencies ?? []).some((d) => d.name === "drover-common"))
      list.push({ from: library, to: [`charts/${chart}/charts/drover-common`] });
    // A controller chart installs the CRD; it names AgentTask objects in its templates.
    if (existsSync(join(root, "charts", chart, "templates", "agenttask.yaml")))
      list[0].to.push(`charts/${chart}/crds/agenttasks.drover.dev.yaml`);
  }
  return list;
}

/** The files under a path (itself when it is a file), relative to it, sorted. */
function filesOf(path) {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return [""];
  return readdirSync(path, { recursive: true })
    .map(String)
    .filter((f) => !statSync(join(path, f)).isDirectory())
    .sort();
}

const check = process.argv.includes("--check");
const stale = [];
for (const { from, to } of copies()) {
  const source = join(root, from);
  const want = filesOf(source);
  for (const target of to) {
    const dest = join(root, target);
    const have = filesOf(dest);
    const same =
      have.length === want.length &&
      want.every((f, i) => have[i] === f && readFileSync(join(source, f)).equals(readFileSync(join(dest, f))));
    if (same) continue;
    if (check) {
      stale.push(relative(root, dest));
    } else if (want.length === 1 && want[0] === "") {
      mkdirSync(dirname(dest), { recursive: true });
      writeFileSync(dest, readFileSync(source));
    } else {
      rmSync(dest, { recursive: true, force: true });
      cpSync(source, dest, { recursive: true });
    }
  }
}
if (stale.length > 0) {
  console.error(`stale copies: ${stale.join(", ")}; run \`node scripts/chart-copies.mjs\``);
  process.exit(1);
}
