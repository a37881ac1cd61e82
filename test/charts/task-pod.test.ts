import assert from "node:assert/strict";

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { buildJob } from "@drover/agent/kubernetes";
import { helmTemplate } from "../support/helm.js";

// The task pod template of both controller charts (the AgentTask's jobTemplate) as rendered
// with the charts' CI values (max-values.yaml has a long-running log-shipper sidecar).

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";

function taskPodSpec(chart: string, args: string[] = []): any {
  const out = helmTemplate([
    "template",
    "rel",
    join(repo, "charts", chart),
    "-f",
    join(repo, "charts", chart, "ci", "max-values.yaml"),
    "--set",
    `agent.token=${token}`,
    ...args,
  ]);
  const task = parseAllDocuments(out)
    .map((d) => d.toJSON() as any)
    .find((o) => o?.kind === "AgentTask");
  assert.ok(task, `${chart}: no AgentTask`);
  return task.spec.jobTemplate.template.spec;
}

const tini = ["/usr/bin/tini", "--", "drover"];

test("I12: the image's tini is at /usr/bin/tini; a Job the controller builds without a worker command runs the worker under it", () => {
  const dockerfile = readFileSync(join(repo, "deploy", "docker", "Dockerfile"), "utf8");
  assert.match(dockerfile, /apt-get install [^\n]*\btini\b/, "Debian's tini package installs /usr/bin/tini");
  assert.match(dockerfile, /^ENTRYPOINT \["\/usr\/bin\/tini", "--", "drover"\]$/m);
  const assignment = {
    jobId: "j",
    runId: "r",
    phase: "plan",
    attempt: 1,
    workspace: { id: "w" },
  } as unknown as Parameters<typeof buildJob>[0];
  const settings = {
    namespace: "ns",
    controllerName: "c",
    serverUrl: "http://s",
    workerImage: "w",
    execLoopPath: "/e",
    stopAction: "graceful",
    gracePeriodSeconds: 120,
    activeDeadlineSeconds: 60,
    ttlSecondsAfterFinished: 60,
  } as const;
  const pod = buildJob(assignment, undefined, settings).spec!.template.spec!;
  assert.deepEqual(pod.containers.find((c) => c.name === "worker")!.command, tini);
});

for (const chart of ["agent-job", "agent-k8s"]) {
  test(`${chart}: the task worker runs under tini (I12)`, () => {
    // agent-k8s has a worker in task pods only with jobWorker (node mode: each node's worker).
    const spec = taskPodSpec(chart, chart === "agent-k8s" ? ["--set", "jobWorker=true"] : []);
    assert.deepEqual(spec.containers.find((c: any) => c.name === "worker")?.command, tini);
  });

  test(`${chart}: task.sidecars are native sidecars (init containers with restartPolicy Always), after drover-init`, () => {
    const spec = taskPodSpec(chart);
    assert.deepEqual(
      spec.initContainers.map((c: any) => [c.name, c.restartPolicy]),
      [
        ["drover-init", undefined],
        ["log-shipper", "Always"],
      ],
    );
    assert.ok(
      !spec.containers.some((c: any) => c.name === "log-shipper"),
      "a sidecar among the regular containers keeps the Job open",
    );
  });
}

test("I6: both charts give the controller a 120 s image pull grace by default", () => {
  for (const chart of ["agent-job", "agent-k8s"]) {
    const out = helmTemplate(["template", "rel", join(repo, "charts", chart), "--set", `agent.token=${token}`]);
    const deployment = parseAllDocuments(out)
      .map((d) => d.toJSON() as any)
      .find((o) => o?.kind === "Deployment");
    const env = deployment.spec.template.spec.containers[0].env as { name: string; value?: string }[];
    assert.equal(env.find((e) => e.name === "DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS")?.value, "120", chart);
  }
});
