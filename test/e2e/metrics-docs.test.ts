// docs/metrics.md is the one table of Drover's metrics. The server and a local agent run
// examples/hello; what their /metrics expose must be exactly the table's server and agent
// rows (names, types, label names), and the Kubernetes processes' definitions exactly their
// rows. The Grafana dashboard may reference table metrics only.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { freePort } from "../support/processes.js";
import { startStack, type Stack } from "../support/stack.js";
import { routes } from "@drover/protocol";

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");

interface Row {
  name: string;
  type: string;
  labels: string[];
  process: string;
}

function table(): Row[] {
  const doc = readFileSync(join(repo, "docs", "metrics.md"), "utf8");
  const body = doc.slice(doc.indexOf("<!-- metrics:start -->"), doc.indexOf("<!-- metrics:end -->"));
  return body
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .map((l) => {
      const [name, type, labels, process] = l
        .split("|")
        .slice(1, 5)
        .map((c) => c.trim());
      return {
        name: name!.replaceAll("`", ""),
        type: type!,
        labels: labels === "—" ? [] : labels!.split(",").map((x) => x.trim().replaceAll("`", "")),
        process: process!,
      };
    });
}

/** Names, types and label names of a Prometheus exposition. */
function exposed(text: string): Map<string, { type: string; labels: Set<string> }> {
  const out = new Map<string, { type: string; labels: Set<string> }>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, { type: m[2]!, labels: new Set() });
  for (const m of text.matchAll(/^([a-z_:]+?)(?:_bucket|_sum|_count)?\{([^}]*)\} /gm)) {
    const entry = out.get(m[1]!) ?? out.get(m[0]!.split("{")[0]!);
    for (const l of m[2]!.matchAll(/([a-zA-Z_]+)="/g)) if (l[1] !== "le") entry?.labels.add(l[1]!);
  }
  return out;
}

let stack: Stack;
let agentPort: number;
before(async () => {
  stack = await startStack();
  agentPort = await freePort();
  await stack.startAgent("documented", { DROVER_AGENT_HEALTH_PORT: String(agentPort) });
  await stack.server.api(routes.createWorkspace, { body: { name: "documented-hello", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "documented-hello", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"], 120_000)).status, "applied");
});
after(() => stack?.stop());

test("the server's and the agent's /metrics are exactly the table's rows: names, types, labels", async () => {
  const rows = table();
  for (const [process, url] of [
    ["server", `${stack.server.url}/metrics`],
    ["agent", `http://127.0.0.1:${agentPort}/metrics`],
  ] as const) {
    // eslint-disable-next-line no-restricted-globals -- the agent's health port as well as the server's /metrics, read alike
    const seen = exposed(await (await fetch(url)).text());
    const documented = rows.filter((r) => r.process === process);
    assert.deepEqual(
      [...seen.keys()].sort(),
      documented.map((r) => r.name).sort(),
      `${process}: emitted vs documented`,
    );
    for (const r of documented) {
      const s = seen.get(r.name)!;
      assert.equal(s.type, r.type, `${r.name} type`);
      // Series with no sample yet (a state with no run) show no labels: emitted labels ⊆ documented.
      for (const l of s.labels) assert.ok(r.labels.includes(l), `${r.name}: label ${l} is not documented`);
    }
    // Low cardinality: no label names an ID.
    for (const r of documented) for (const l of r.labels) assert.doesNotMatch(l, /id$/i, `${r.name} has an ID label`);
  }
});

test("the Kubernetes processes define exactly the table's controller, node-worker and worker rows", () => {
  const rows = table();
  for (const [process, file] of [
    ["controller", "controller-metrics.js"],
    ["node-worker", "node-worker.js"],
    ["worker", "worker.js"],
  ] as const) {
    const source = readFileSync(join(repo, "packages", "agent", "dist", "src", "drivers", "kubernetes", file), "utf8");
    const defined = [...source.matchAll(/\.define\(\s*"(drover_[a-z_]+)",\s*"(gauge|counter|histogram)"/g)]
      .map((m) => `${m[1]} ${m[2]}`)
      .sort();
    assert.deepEqual(
      defined,
      rows
        .filter((r) => r.process === process)
        .map((r) => `${r.name} ${r.type}`)
        .sort(),
      process,
    );
  }
});

test("the Grafana dashboard references table metrics only, and every row has a panel", () => {
  const dashboard = JSON.parse(readFileSync(join(repo, "deploy", "grafana", "drover.json"), "utf8")) as {
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
  };
  const names = new Map(table().map((r) => [r.name, r]));
  const used = new Set<string>();
  for (const p of dashboard.panels) {
    assert.ok(p.targets.length > 0, p.title);
    for (const t of p.targets) {
      for (const m of t.expr.matchAll(/\bdrover_[a-z_]+/g)) {
        const name = m[0].replace(/_(bucket|sum|count)$/, "");
        const row = names.get(name);
        assert.ok(row, `${p.title}: ${m[0]} is not a documented metric`);
        if (m[0] !== name) assert.equal(row.type, "histogram", `${m[0]}: only histograms have _bucket/_sum/_count`);
        used.add(name);
      }
    }
  }
  assert.deepEqual(
    [...names.keys()].filter((n) => !used.has(n)),
    [],
    "every documented metric is on the dashboard",
  );
});
