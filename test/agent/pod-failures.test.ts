import assert from "node:assert/strict";
import { test } from "node:test";
import type { V1Pod } from "@kubernetes/client-node";
import { describePodFailure, loadControllerSettings } from "@drover/agent/kubernetes";

// What the controller counts as a task pod's failure (pod-failures.ts).

const created = Date.parse("2026-11-28T12:00:00Z");
const timings = loadControllerSettings({ DROVER_AGENT_KUBERNETES_NAMESPACE: "ns" }).timings;

function pod(status: V1Pod["status"], spec: V1Pod["spec"] = { containers: [] }): V1Pod {
  return { metadata: { name: "p", creationTimestamp: new Date(created) }, spec, status };
}

test("I6: by default an image pull failing for a minute is left to kubelet's backoff; after 120 s it fails the run", () => {
  const pulling = pod({
    phase: "Pending",
    containerStatuses: [
      {
        name: "worker",
        image: "w",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { waiting: { reason: "ImagePullBackOff", message: "429 Too Many Requests" } },
      },
    ],
  });
  assert.equal(describePodFailure(pulling, created + 60_000, timings), undefined);
  assert.equal(describePodFailure(pulling, created + 121_000, timings)?.reason, "image_pull");
  const config = pod({
    phase: "Pending",
    containerStatuses: [
      {
        name: "worker",
        image: "w",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { waiting: { reason: "CreateContainerConfigError", message: 'secret "s" not found' } },
      },
    ],
  });
  assert.equal(describePodFailure(config, created + 60_000, timings), undefined);
  assert.equal(describePodFailure(config, created + 121_000, timings)?.reason, "create_container");
});

test("B3: a native sidecar stopped at the pod's end (exit 137) is no failure; a failed init container is", () => {
  const spec: V1Pod["spec"] = {
    initContainers: [{ name: "drover-init" }, { name: "log-shipper", restartPolicy: "Always" }],
    containers: [{ name: "worker" }],
  };
  const terminated = (name: string, exitCode: number) => ({
    name,
    image: "i",
    imageID: "",
    ready: false,
    restartCount: 0,
    state: { terminated: { exitCode, reason: exitCode === 0 ? "Completed" : "Error" } },
  });
  const done = pod(
    {
      phase: "Succeeded",
      initContainerStatuses: [terminated("drover-init", 0), terminated("log-shipper", 137)],
      containerStatuses: [terminated("worker", 0)],
    },
    spec,
  );
  assert.equal(describePodFailure(done, created + 1000, timings), undefined);
  const initFailed = pod(
    { phase: "Failed", initContainerStatuses: [terminated("drover-init", 1)], containerStatuses: [] },
    spec,
  );
  assert.equal(describePodFailure(initFailed, created + 1000, timings)?.reason, "init_failed");
});
