import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import {
  buildScriptVariables,
  nonSettingVariables,
  reservedSettings,
  settings,
  settingsReadBy,
  withSettingsTables,
  type SettingName,
  type SettingReader,
} from "@drover/protocol";

// Nothing reads, documents or sets a setting the table does not know: the compiled code, the
// exec-loop, the README and every chart are checked against packages/protocol/src/settings.ts.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const known = new Set<string>([...Object.keys(settings), ...nonSettingVariables]);
const isSetting = (name: string): name is SettingName => name in settings;

function files(dir: string, ext: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files(path, ext, out);
    else if (name.endsWith(ext)) out.push(path);
  }
  return out;
}

/** The shipped code: every package's compiled sources, the Pulumi component, the exec-loop. */
const shipped = [
  ...readdirSync(join(repo, "packages")).flatMap((p) => {
    const dist = join(repo, "packages", p, "dist", "src");
    return existsSync(dist) ? files(dist, ".js") : [];
  }),
  // The web UI is bundled by Vite, not compiled by tsc: its sources are what ships.
  ...files(join(repo, "packages", "web", "src"), ".ts"),
  ...files(join(repo, "packages", "web", "src"), ".tsx"),
  ...files(join(repo, "deploy", "pulumi", "dist", "src"), ".js"),
  ...files(join(repo, "packages", "agent", "exec-loop"), ".sh"),
].map((path) => ({ path: path.slice(repo.length + 1), text: readFileSync(path, "utf8") }));

/** The table's own modules (settings.js and its parts under settings/): they name what they declare. */
const isSettingsTable = (path: string) => /protocol\/dist\/src\/settings(\.js$|\/)/.test(path);

/** `DROVER_*` names in a text; a name ending in `_` is a prefix (`DROVER_TEST_`), not a variable. */
const droverNames = (text: string) => [...text.matchAll(/\bDROVER_[A-Z0-9_]*[A-Z0-9]\b(?!_)/g)].map((m) => m[0]);

test("every DROVER_* name in the shipped code is a setting of the table (or a variable Drover sets for runs)", () => {
  // The table's own module names only what it declares (build-script variables included).
  const code = shipped.filter((f) => !isSettingsTable(f.path));
  const unknown = code.flatMap(({ path, text }) =>
    droverNames(text)
      .filter((n) => !known.has(n))
      .map((n) => `${path}: ${n}`),
  );
  assert.deepEqual([...new Set(unknown)], []);
});

test("every DROVER_* name in the repository's scripts is a setting, a run variable or a build-script variable", () => {
  const allowed = new Set<string>([...known, ...buildScriptVariables]);
  const scripts = files(join(repo, "scripts"), ".mjs").map((path) => ({
    path: path.slice(repo.length + 1),
    text: readFileSync(path, "utf8"),
  }));
  const unknown = scripts.flatMap(({ path, text }) =>
    droverNames(text)
      .filter((n) => !allowed.has(n) && !n.startsWith("DROVER_TEST_"))
      .map((n) => `${path}: ${n}`),
  );
  assert.deepEqual([...new Set(unknown)], []);
});

test("every environment read in the shipped code (process.env.X, env.X) is a setting of the table", () => {
  // Reads of the environment that are not settings: the search path handed on to terraform; the
  // CA files of git, OpenSSL and Node, whose roots the module cache's git CA bundle keeps
  // (modules/cache.ts).
  const notSettings = new Set(["PATH", "GIT_SSL_CAINFO", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"]);
  const reads = shipped.flatMap(({ path, text }) =>
    [...text.matchAll(/\benv(?:\.([A-Z_][A-Z0-9_]*)\b|\[["']([A-Za-z_][A-Za-z0-9_]*)["']\])(?!\s*=[^=])/g)].map(
      (m) => ({ path, name: m[1] ?? m[2] ?? "" }),
    ),
  );
  assert.ok(reads.length > 0, "the scan found no reads at all: it is looking in the wrong place");
  assert.deepEqual(
    reads.filter((r) => !isSetting(r.name) && !notSettings.has(r.name)).map((r) => `${r.path}: env.${r.name}`),
    [],
  );
});

test("every setting of the table is read by the shipped code (none is stale)", () => {
  // Read by undici's EnvHttpProxyAgent, not by our code.
  const readByLibraries = new Set(["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"]);
  const mentioned = new Set(
    shipped
      .filter((f) => !isSettingsTable(f.path))
      .flatMap((f) => [...f.text.matchAll(/\b[A-Z][A-Z0-9_]+\b/g)].map((m) => m[0])),
  );
  assert.deepEqual(
    Object.keys(settings).filter((n) => !mentioned.has(n) && !readByLibraries.has(n)),
    [],
  );
});

test("the README's configuration tables are the ones the table generates, and name every setting", () => {
  const readme = readFileSync(join(repo, "README.md"), "utf8");
  assert.equal(
    withSettingsTables(readme),
    readme,
    "README.md is out of date: run `npm run build && node scripts/settings-docs.mjs`",
  );
  const tables = [...readme.matchAll(/<!-- settings:[a-z-]+ -->\n([\s\S]*?)\n<!-- \/settings -->/g)]
    .map((m) => m[1])
    .join("\n");
  assert.deepEqual(
    Object.keys(settings).filter((n) => !tables.includes(`\`${n}\``)),
    [],
  );
});

// ---- charts ----

const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string };
};
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";

interface Container {
  name: string;
  command?: string[];
  args?: string[];
  env?: { name: string }[];
}
interface PodSpec {
  containers?: Container[];
  initContainers?: Container[];
}

/** The process a container runs: `drover agent <command>`, the exec-loop runner, or none of ours. */
function processOf(c: Container): SettingReader | undefined {
  const words = [...(c.command ?? []), ...(c.args ?? [])];
  const i = words.indexOf("agent");
  const command = i >= 0 ? words[i + 1] : undefined;
  if (command === "run") return "agent";
  if (command === "vcs") return "vcs-agent";
  if (command === "controller" || command === "worker" || command === "node-worker" || command === "pod-annotator")
    return command;
  if (c.name === "runner") return "runner";
  return undefined;
}

function podSpecs(o: {
  kind: string;
  spec?: { template?: { spec?: PodSpec }; jobTemplate?: { template?: { spec?: PodSpec } } };
}): PodSpec[] {
  if (o.kind === "AgentTask") return o.spec?.jobTemplate?.template?.spec ? [o.spec.jobTemplate.template.spec] : [];
  return o.spec?.template?.spec ? [o.spec.template.spec] : [];
}

const charts = ["agent-local", "agent-job", "agent-k8s"];
for (const chart of charts) {
  test(`chart ${chart}: every variable it sets is a setting of the process its container runs, and its reserved names are settings`, () => {
    const dir = join(repo, "charts", chart);
    const configurations = [
      ["--set", `agent.token=${token}`],
      ...readdirSync(join(dir, "ci")).map((f) => ["-f", join(dir, "ci", f)]),
    ];
    const problems = new Set<string>();
    let checked = 0;
    for (const args of configurations) {
      const out = execFileSync(tools().helm, ["template", "rel", dir, "--namespace", "drover", ...args], {
        encoding: "utf8",
      });
      for (const doc of parseAllDocuments(out)) {
        const o = doc.toJSON() as Parameters<typeof podSpecs>[0] | null;
        if (!o) continue;
        for (const spec of podSpecs(o)) {
          for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
            const reader = processOf(c);
            for (const { name } of c.env ?? []) {
              if (!name.startsWith("DROVER_")) continue;
              checked++;
              if (!isSetting(name)) {
                if (!(nonSettingVariables as readonly string[]).includes(name))
                  problems.add(`${o.kind} ${c.name}: ${name} is not a setting`);
              } else if (reader && !settingsReadBy(reader).includes(name)) {
                problems.add(`${o.kind} ${c.name} (${reader}): ${name} is not read by ${reader}`);
              }
            }
          }
        }
      }
    }
    assert.ok(checked > 0, "no DROVER_* variable found in the rendered chart");
    const helpers = readFileSync(join(dir, "templates", "_helpers.tpl"), "utf8");
    const reserved = /define "drover\.reservedEnv" -}}\n([^{]*)\{\{/.exec(helpers)?.[1]?.trim().split(/\s+/) ?? [];
    assert.ok(reserved.length > 0, "no reservedEnv list in _helpers.tpl");
    for (const name of reserved) if (!isSetting(name)) problems.add(`reservedEnv: ${name} is not a setting`);
    assert.deepEqual([...problems], []);
  });
}

test("the settings the Pulumi component reserves all come from the table", () => {
  assert.ok(reservedSettings().includes("DROVER_TOKEN"));
  for (const name of reservedSettings()) assert.ok(isSetting(name));
});
