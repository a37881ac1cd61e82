import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";
import { freePort, spawnDrover } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { testRunUid } from "../support/run-users.js";
import { routes } from "@drover/protocol";

/*
 * The engine version a workspace asks for is the one that runs: the agent downloads it from a
 * release server on 127.0.0.1 (the real terraform zipped as 1.11.4, a fake as 1.10.0), verifies
 * it, and runs it from its cache; a lying release fails the run with the reason, running nothing.
 */

let stack: Stack;
let releases: TestReleaseServer;
let metricsPort: number;
const realVersion = "1.11.4";

before(async () => {
  stack = await startStack();
  releases = await startReleaseServer([
    { engine: "terraform", version: realVersion, binary: "/usr/local/bin/terraform" },
    { engine: "terraform", version: "1.10.0" },
    { engine: "tofu", version: "1.8.0" },
    { engine: "tofu", version: "1.9.0" },
  ]);
  metricsPort = await freePort();
  await stack.startAgent("engines", {
    DROVER_AGENT_CONCURRENCY: "3",
    DROVER_AGENT_TERRAFORM_RELEASES_URL: releases.base("terraform"),
    DROVER_AGENT_TOFU_RELEASES_URL: releases.base("tofu"),
    DROVER_AGENT_TOFU_VERSIONS_URL: releases.tofuIndex,
    // Smaller than terraform itself: every release no job holds is evicted after the next one.
    DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB: "1",
    DROVER_AGENT_ENGINE_SIGNING_KEYS: releases.keyFile,
    DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS: releases.fingerprint,
    DROVER_AGENT_ENGINE_PATH_FALLBACK: "false",
    DROVER_AGENT_HEALTH_PORT: String(metricsPort),
  });
});
after(async () => {
  await stack.stop();
  await releases.close();
});

async function metric(name: string): Promise<number> {
  // eslint-disable-next-line no-restricted-globals -- the agent's /metrics, not the server
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  return Number(new RegExp(`^${name}\\{cache="engines"\\} (\\d+)$`, "m").exec(text)?.[1] ?? "NaN");
}

test("a workspace's engineVersion (exact, from the CLI) selects the downloaded, verified terraform for plan and apply, downloaded once for three concurrent runs; a constraint reuses it", async () => {
  const create = await stack.cli([
    "workspace",
    "create",
    "tf-pinned",
    "--pool",
    stack.pool,
    "--engine-version",
    realVersion,
    "--auto-apply",
  ]);
  assert.equal(create.code, 0, create.stderr);
  const dir = writeConfig(stack.dir, "tf-pinned", {
    "main.tf": 'resource "terraform_data" "a" { input = "pinned" }\noutput "v" { value = terraform_data.a.output }\n',
  });
  // Two more runs want the same version at the same time (the agent runs 3 jobs at once).
  const others = await Promise.all(
    ["tf-pinned-2", "tf-pinned-3"].map(async (ws) => {
      await stack.server.api(routes.createWorkspace, {
        body: { name: ws, pool: stack.pool, engineVersion: realVersion },
      });
      return stack.startRun(writeConfig(stack.dir, ws, { "main.tf": 'resource "terraform_data" "a" {}\n' }), ws, [
        "--plan-only",
      ]);
    }),
  );
  const runId = await stack.startRun(dir, "tf-pinned");
  const planLogs: string[] = [];
  for (const other of others) {
    const done = await stack.waitForRun(other, ["planned_and_finished", "errored"], 180_000);
    assert.equal(done.status, "planned_and_finished", done.errorMessage);
    planLogs.push(await runLog(stack.server, other, "plan"));
  }
  const run = await stack.waitForRun(runId, ["applied", "errored", "planned_and_finished"], 180_000);
  const plan = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${plan}`);
  const stored = join("engines", "releases", releases.archiveSha("terraform", realVersion), "terraform");
  assert.ok(plan.includes(`[drover] terraform ${realVersion} (`) && plan.includes(stored), plan);
  planLogs.push(plan);
  for (const log of planLogs)
    assert.ok(log.includes(`[drover] terraform ${realVersion} (`) && log.includes(stored), log);
  // One run downloaded it; the others waited for that download or found it stored.
  const downloaded = new RegExp(
    `downloaded from .*terraform_${realVersion.replace(/\./g, "\\.")}_linux_amd64\\.zip, verified: sha256 [0-9a-f]{64}, SHA256SUMS signed by ${releases.fingerprint}`,
  );
  assert.equal(planLogs.filter((l) => downloaded.test(l)).length, 1, planLogs.join("\n----\n"));
  assert.equal(planLogs.filter((l) => /from the agent's verified cache/.test(l)).length, 2);
  const apply = await runLog(stack.server, runId, "apply");
  assert.match(apply, /from the agent's verified cache/);
  assert.match(apply, /Apply complete! Resources: 1 added/);

  await stack.server.api(routes.createWorkspace, {
    body: { name: "tf-constrained", pool: stack.pool, engineVersion: "~> 1.11.0" },
  });
  const dir2 = writeConfig(stack.dir, "tf-constrained", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const run2 = await stack.startRun(dir2, "tf-constrained", ["--plan-only"]);
  const done2 = await stack.waitForRun(run2, ["planned_and_finished", "errored"], 180_000);
  const log2 = await runLog(stack.server, run2, "plan");
  assert.equal(done2.status, "planned_and_finished", `${done2.errorMessage}\n${log2}`);
  assert.ok(log2.includes(`[drover] terraform ${realVersion} (`) && log2.includes(stored), log2);
  assert.equal(releases.downloads.get(`terraform_${realVersion}_linux_amd64.zip`), 1, "downloaded once for the agent");
  assert.equal(await metric("drover_agent_cache_misses_total"), 1);
  assert.ok((await metric("drover_agent_cache_hits_total")) >= 4);
});

test("a release whose archive does not match its signed SHA256SUMS fails the run with the reason; nothing runs", async () => {
  releases.lie("terraform", "1.10.0", "archive");
  await stack.server.api(routes.createWorkspace, {
    body: { name: "tf-tampered", pool: stack.pool, engineVersion: "1.10.0" },
  });
  const dir = writeConfig(stack.dir, "tf-tampered", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "tf-tampered", ["--plan-only"]);
  const run = await stack.waitForRun(runId, ["errored", "planned_and_finished"], 120_000);
  assert.equal(run.status, "errored");
  assert.match(
    run.errorMessage,
    /^engine_checksum_mismatch: .*terraform_1\.10\.0_linux_amd64\.zip has sha256 [0-9a-f]{64}, but the signed terraform_1\.10\.0_SHA256SUMS lists [0-9a-f]{64}; nothing was installed or run/,
  );
  assert.ok(!releases.executed("terraform", "1.10.0"), "the unverified binary never ran");
  assert.doesNotMatch(await runLog(stack.server, runId, "plan"), /\$ terraform init/);
  releases.lie("terraform", "1.10.0", undefined);
});

test("a version the releases lack fails the run when the fallback to PATH is off, though PATH has a terraform", async () => {
  await stack.server.api(routes.createWorkspace, {
    body: { name: "tf-missing", pool: stack.pool, engineVersion: ">= 1.12" },
  });
  const dir = writeConfig(stack.dir, "tf-missing", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "tf-missing", ["--plan-only"]);
  const run = await stack.waitForRun(runId, ["errored", "planned_and_finished"], 120_000);
  assert.equal(run.status, "errored");
  assert.match(
    run.errorMessage,
    /^engine_version_missing: terraform >= 1\.12 is not among the releases at .*index\.json \(newest offered: 1\.11\.4\); the agent does not fall back to a terraform on PATH \(DROVER_AGENT_ENGINE_PATH_FALLBACK=false\)/,
  );
});

test("a tofu workspace's constraint selects the newest tofu release (OpenTofu's layout), and the size limit evicts the idle terraform", async () => {
  await stack.server.api(routes.createWorkspace, {
    body: { name: "tofu-constrained", pool: stack.pool, engine: "tofu", engineVersion: "~> 1.8" },
  });
  const dir = writeConfig(stack.dir, "tofu-constrained", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "tofu-constrained", ["--plan-only"]);
  // The fake tofu prints no plan: the run may fail after it ran; which binary ran is the point.
  await stack.waitForRun(runId, ["errored", "planned_and_finished"], 120_000);
  const log = await runLog(stack.server, runId, "plan");
  assert.ok(
    log.includes(`[drover] tofu 1.9.0 (`) &&
      log.includes(join("engines", "releases", releases.archiveSha("tofu", "1.9.0"), "tofu")),
    log,
  );
  assert.match(log, /downloaded from .*\/tofu\/v1\.9\.0\/tofu_1\.9\.0_linux_amd64\.zip, verified/);
  assert.ok(releases.executed("tofu", "1.9.0"), "the selected tofu ran");
  assert.ok(!releases.executed("tofu", "1.8.0"));
  assert.equal(
    await metric("drover_agent_cache_evictions_total"),
    1,
    "terraform (no job holds it) was evicted above DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB",
  );
  assert.ok(
    !existsSync(
      join(stack.dir, "agent-engines", "cache", "engines", "releases", releases.archiveSha("terraform", realVersion)),
    ),
  );
});

test(
  "a run as another user runs the cached terraform and cannot write it: its provisioner is refused by the filesystem",
  { skip: process.getuid?.() !== 0 ? "only root can start runs as another user" : false },
  async () => {
    await stack.server.api(routes.createPool, { body: { name: "engines-ro" } });
    const token = (
      await stack.server.api(routes.createPoolToken, { params: { pool: "engines-ro" }, body: { description: "ro" } })
    ).body.token as string;
    // Reachable (0711) by the run user, like /var/lib/drover.
    const home = mkdtempSync(join(tmpdir(), "drover-engines-"));
    chmodSync(home, 0o711);
    const cache = join(home, "cache");
    writeFileSync(join(home, "terraformrc"), "", { mode: 0o644 });
    const runUid = testRunUid();
    const agent = spawnDrover(["agent", "run"], {
      ...stack.baseEnv,
      TF_CLI_CONFIG_FILE: join(home, "terraformrc"),
      DROVER_TOKEN: token,
      DROVER_AGENT_NAME: "engines-ro",
      DROVER_AGENT_DATA_DIR: join(home, "data"),
      DROVER_AGENT_CACHE_DIR: cache,
      DROVER_AGENT_HEALTH_PORT: "0",
      DROVER_AGENT_RUN_AS_USER: String(runUid),
      DROVER_AGENT_TERRAFORM_RELEASES_URL: releases.base("terraform"),
      DROVER_AGENT_ENGINE_SIGNING_KEYS: releases.keyFile,
      DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS: releases.fingerprint,
    });
    try {
      await agent.waitFor(/registered/);
      await stack.server.api(routes.createWorkspace, {
        body: { name: "engines-ro", pool: "engines-ro", autoApply: true, engineVersion: realVersion },
      });
      const binary = join(cache, "engines", "releases", releases.archiveSha("terraform", realVersion), "terraform");
      const attempts = [
        `echo planted >> ${binary}`,
        `touch ${join(binary, "..", "planted")}`,
        `chmod u+w ${binary}`,
        `mv ${binary} ${binary}.moved`,
      ];
      const command = attempts
        .map((c, i) => `( ${c} ) 2>/dev/null && echo WRITE${i}:ok || echo WRITE${i}:refused`)
        .join("; ");
      const dir = writeConfig(stack.dir, "engines-ro", {
        "main.tf": `resource "terraform_data" "probe" {\n  provisioner "local-exec" {\n    command = ${JSON.stringify(command)}\n  }\n}\n`,
      });
      const runId = await stack.startRun(dir, "engines-ro");
      const run = await stack.waitForRun(runId, ["applied", "errored"], 180_000);
      const log = await runLog(stack.server, runId, "apply");
      assert.equal(run.status, "applied", `${run.errorMessage}\n${log}`);
      assert.ok(log.includes(binary), log);
      for (let i = 0; i < attempts.length; i++)
        assert.match(log, new RegExp(`WRITE${i}:refused`), `${attempts[i]} was not refused:\n${log}`);
      assert.equal(statSync(binary).mode & 0o222, 0);
      assert.ok(!readFileSync(binary).includes("planted"));
    } finally {
      await agent.stop("SIGKILL");
      rmSync(home, { recursive: true, force: true });
    }
  },
);
