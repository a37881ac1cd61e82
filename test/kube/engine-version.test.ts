// Kubernetes job mode runs the engine version a workspace asks for: the task pod's worker
// downloads and verifies it into the pod's cache volume, and the runner container executes it
// from there (mounted read-only). The runner image's own terraform (1.11.4, this machine's)
// stands in only through the fallback, and only when it satisfies the version.
import assert from "node:assert/strict";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
} from "./agents.js";
import { routes } from "@drover/protocol";
import { releaseEnv, wrapperRelease } from "./engine-releases.js";

const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let releases: TestReleaseServer;
let marks: string;

before(async () => {
  const release = wrapperRelease("1.99.0");
  marks = release.marks;
  const wrapper = release.binary;
  releases = await startReleaseServer([
    { engine: "terraform", version: "1.99.0", binary: wrapper },
    { engine: "terraform", version: "1.98.0" },
  ]);
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(releaseEnv(releases)), terraformRunner(stack)]);
  controller = startJobModeController(cluster, stack, { ns, name: "engine-ctl" });
  await agentRegistered(stack, "engine-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
  await releases?.close();
  rmSync(marks, { recursive: true, force: true });
});

test("job mode: the worker downloads the asked version the runner image lacks and the runner executes it, unable to write the cache; a tampered release fails the run with the reason; the runner's own engine stands in only when it satisfies the version", async () => {
  await stack.server.api(routes.createWorkspace, {
    body: { name: "k8s-pinned", pool: stack.pool, engineVersion: "1.99.0", autoApply: true },
  });
  const probe =
    "if touch /var/lib/drover/cache/engines/planted 2>/dev/null; then echo CACHE-WRITTEN; else echo CACHE-READ-ONLY; fi";
  const dir = writeConfig(stack.dir, "k8s-pinned", {
    "main.tf": `resource "terraform_data" "a" {\n  provisioner "local-exec" {\n    command = "${probe}"\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, "k8s-pinned", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["errored", "applied", "failed"], 180_000);
  const plan = await runLog(stack.server, runId, "plan");
  const apply = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${plan}\n${apply}\n${controller.output()}`);
  assert.match(
    plan,
    new RegExp(
      `terraform 1\\.99\\.0 downloaded from .*verified: sha256 ${releases.archiveSha("terraform", "1.99.0")}, SHA256SUMS signed by ${releases.fingerprint}`,
    ),
  );
  assert.match(
    plan,
    /\[drover\] terraform 1\.99\.0 \(\/var\/lib\/drover\/cache\/engines\/releases\/[0-9a-f]{64}\/terraform\)/,
  );
  assert.match(plan, /release 1\.99\.0 wrapping this machine's terraform/, "the runner ran the downloaded binary");
  assert.ok(existsSync(join(marks, "ran-1.99.0")));
  assert.match(apply, /\(local-exec\): CACHE-READ-ONLY/);
  assert.doesNotMatch(apply, /\(local-exec\): CACHE-WRITTEN/);

  releases.lie("terraform", "1.98.0", "archive");
  await stack.server.api(routes.createWorkspace, {
    body: { name: "k8s-tampered", pool: stack.pool, engineVersion: "1.98.0" },
  });
  const bad = await stack.startRun(
    writeConfig(stack.dir, "k8s-tampered", { "main.tf": 'resource "terraform_data" "a" {}\n' }),
    "k8s-tampered",
    ["--plan-only"],
  );
  const failed = await stack.waitForRun(bad, ["errored", "planned_and_finished"], 120_000);
  assert.equal(failed.status, "errored");
  assert.match(
    failed.errorMessage,
    /^engine_checksum_mismatch: .*terraform_1\.98\.0_linux_amd64\.zip has sha256 [0-9a-f]{64}, but the signed .*; nothing was installed or run/,
  );
  assert.doesNotMatch(await runLog(stack.server, bad, "plan"), /\$ terraform init/);
  assert.equal(releases.executed("terraform", "1.98.0"), false);

  // Not among the releases: the runner image's terraform may stand in only if it satisfies the version.
  await stack.server.api(routes.createWorkspace, {
    body: { name: "k8s-other", pool: stack.pool, engineVersion: "0.0.1" },
  });
  const other = await stack.startRun(
    writeConfig(stack.dir, "k8s-other", { "main.tf": 'resource "terraform_data" "a" {}\n' }),
    "k8s-other",
    ["--plan-only"],
  );
  const refused = await stack.waitForRun(other, ["errored", "planned_and_finished"], 120_000);
  assert.equal(refused.status, "errored");
  assert.match(
    refused.errorMessage,
    /^engine_unavailable: terraform 0\.0\.1 is not among the releases at .*; no terraform in the runner image satisfies 0\.0\.1 either \(in the runner image: \d+\.\d+\.\d+\)/,
  );
  assert.doesNotMatch(await runLog(stack.server, other, "plan"), /\$ terraform init/);

  await stack.server.api(routes.createWorkspace, {
    body: { name: "k8s-ok", pool: stack.pool, engineVersion: ">= 1.0, < 1.50" },
  });
  const ok = await stack.startRun(
    writeConfig(stack.dir, "k8s-ok", { "main.tf": 'resource "terraform_data" "a" {}\n' }),
    "k8s-ok",
    ["--plan-only"],
  );
  const done = await stack.waitForRun(ok, ["errored", "planned_and_finished"], 120_000);
  assert.equal(done.status, "planned_and_finished", `${done.errorMessage}\n${controller.output()}`);
  assert.match(
    await runLog(stack.server, ok, "plan"),
    /not downloaded \(.*\); using terraform \(terraform 1\.\d+\.\d+\) in the runner image \(DROVER_AGENT_ENGINE_PATH_FALLBACK\)/,
  );
});
