import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

// What the charts and the Pulumi component share has one source (the CRD in deploy/kubernetes,
// the library chart charts/drover-common); the copies beside them are written by
// scripts/chart-copies.mjs, and differ from their source only when someone edited a copy.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const script = join(repo, "scripts", "chart-copies.mjs");
const charts = ["agent-local", "agent-job", "agent-k8s"];

const checkIn = (cwd: string) => spawnSync(process.execPath, [script, "--check"], { cwd, encoding: "utf8" });

test("every copy of the CRD and of the library chart equals its source", () => {
  const r = checkIn(repo);
  assert.equal(r.status, 0, r.stderr);
});

test("an edited copy, a missing one or a stray file in one is reported; writing the copies mends them", () => {
  const dir = mkdtempSync(join(tmpdir(), "chart-copies-"));
  try {
    cpSync(join(repo, "charts"), join(dir, "charts"), { recursive: true });
    cpSync(join(repo, "deploy", "kubernetes"), join(dir, "deploy", "kubernetes"), { recursive: true });
    cpSync(join(repo, "deploy", "pulumi", "crds"), join(dir, "deploy", "pulumi", "crds"), { recursive: true });
    assert.equal(checkIn(dir).status, 0);
    writeFileSync(join(dir, "charts", "agent-job", "crds", "agenttasks.drover.dev.yaml"), "kind: Edited\n");
    rmSync(join(dir, "deploy", "pulumi", "crds"), { recursive: true });
    writeFileSync(join(dir, "charts", "agent-local", "charts", "drover-common", "templates", "_extra.tpl"), "");
    const tpl = join(dir, "charts", "agent-k8s", "charts", "drover-common", "templates", "_helpers.tpl");
    writeFileSync(tpl, readFileSync(tpl, "utf8").replace("drover.fullname", "drover.fullName"));
    const r = checkIn(dir);
    assert.equal(r.status, 1);
    for (const stale of [
      "charts/agent-job/crds/agenttasks.drover.dev.yaml",
      "deploy/pulumi/crds/agenttasks.drover.dev.yaml",
      "charts/agent-local/charts/drover-common",
      "charts/agent-k8s/charts/drover-common",
    ])
      assert.ok(r.stderr.includes(stale), `${stale} is not reported:\n${r.stderr}`);
    assert.ok(!r.stderr.includes("charts/agent-job/charts/drover-common"), r.stderr);
    assert.equal(spawnSync(process.execPath, [script], { cwd: dir }).status, 0);
    assert.equal(checkIn(dir).status, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("no chart defines a template of the library itself (which of two definitions wins is Helm's choice)", () => {
  const defines = (templates: string) =>
    readdirSync(templates)
      .flatMap((f) => [...readFileSync(join(templates, f), "utf8").matchAll(/define "([^"]+)"/g)])
      .map((m) => m[1]!);
  const library = new Set(defines(join(repo, "charts", "drover-common", "templates")));
  assert.ok(library.has("drover.cacheEnv") && library.has("drover.secrets"));
  for (const chart of charts) {
    const own = defines(join(repo, "charts", chart, "templates"));
    assert.deepEqual(
      own.filter((d) => library.has(d)),
      [],
      `${chart} redefines what charts/drover-common defines`,
    );
  }
});
