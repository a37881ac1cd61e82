// agent-k8s node mode runs the engine version a workspace asks for: the node's worker downloads
// and verifies it into the node's cache, and every run pod of the node executes it from there
// (mounted read-only), downloaded once for all of them.
import assert from "node:assert/strict";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
} from "./agents.js";
import { routes } from "@drover/protocol";
import { releaseEnv, wrapperRelease } from "./engine-releases.js";

const ns = "drover-node-engines";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents;
let releases: TestReleaseServer;
let marks: string;

before(async () => {
  const release = wrapperRelease("1.99.0");
  marks = release.marks;
  const wrapper = release.binary;
  releases = await startReleaseServer([{ engine: "terraform", version: "1.99.0", binary: wrapper }]);
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
  const workerEnv = Object.fromEntries(releaseEnv(releases).map((e) => [e.name, e.value]));
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "node-engines",
    template: "task-template",
    workerEnv,
  });
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
  await releases?.close();
  rmSync(marks, { recursive: true, force: true });
});

test("node mode: the node's worker downloads the asked version once and the run pods execute it from the node's read-only cache", async () => {
  await stack.server.api(routes.createWorkspace, {
    body: { name: "node-pinned", pool: stack.pool, engineVersion: "1.99.0" },
  });
  const cache = join(agents.home, "cache", "engines");
  const probe = `if touch ${cache}/planted 2>/dev/null; then echo CACHE-WRITTEN; else echo CACHE-READ-ONLY; fi`;
  const dir = writeConfig(stack.dir, "node-pinned", {
    "main.tf": `resource "terraform_data" "a" {\n  provisioner "local-exec" {\n    command = "${probe}"\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, "node-pinned", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["errored", "applied", "failed"], 180_000);
  const plan = await runLog(stack.server, runId, "plan");
  const apply = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${plan}\n${apply}\n${agents.nodeWorker.output()}`);
  assert.match(plan, /terraform 1\.99\.0 downloaded from .*verified/);
  assert.match(plan, new RegExp(`\\[drover\\] terraform 1\\.99\\.0 \\(${cache}/releases/[0-9a-f]{64}/terraform\\)`));
  assert.match(plan, /release 1\.99\.0 wrapping this machine's terraform/);
  assert.match(
    apply,
    /terraform 1\.99\.0 from the agent's verified cache/,
    "the apply's pod used the node's stored release",
  );
  assert.match(apply, /\(local-exec\): CACHE-READ-ONLY/);
  assert.doesNotMatch(apply, /\(local-exec\): CACHE-WRITTEN/);
  assert.ok(existsSync(join(marks, "ran-1.99.0")));
  assert.equal(releases.downloads.get("terraform_1.99.0_linux_amd64.zip"), 1, "one download for the node");
});
