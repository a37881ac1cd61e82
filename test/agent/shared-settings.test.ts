import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { loadAgentConfig } from "@drover/agent";
import { loadNodeWorkerSettings, loadWorkerSettings } from "@drover/agent/kubernetes";
import { newPoolToken } from "@drover/protocol";

// The agent, the controller, the pod worker and the node worker read the settings they share
// (OTLP export, stop action and grace, DROVER_CA_CERT) through one function each
// (packages/agent/src/shared-settings.ts): the same environment gives every process the same values.

const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_x" });
const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

test("one environment gives the agent, the controller and both workers the same OTLP, stop and trust settings", () => {
  const home = mkdtempSync(join(tmpdir(), "drover-shared-settings-"));
  try {
    for (const shared of [
      {},
      {
        DROVER_AGENT_OTLP_ENDPOINT: "http://collector:4317",
        DROVER_AGENT_OTLP_PROTOCOL: "grpc",
        DROVER_AGENT_OTLP_TRACES_ENABLED: "false",
        DROVER_AGENT_OTLP_METRICS_ENABLED: "true",
        DROVER_AGENT_WORKER_ON_STOP_ACTION: "drain",
        DROVER_AGENT_GRACE_PERIOD_SECONDS: "300",
        DROVER_CA_CERT: Buffer.from(pem).toString("base64"),
      },
    ]) {
      const agent = loadAgentConfig({ DROVER_TOKEN: token, ...shared });
      const controller = loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_DRIVER: "kubernetes", ...shared });
      const worker = loadWorkerSettings({ DROVER_URL: "http://127.0.0.1:9", ...shared });
      const node = loadNodeWorkerSettings({
        DROVER_AGENT_NODE_HOME: home,
        DROVER_AGENT_NODE_NAME: "n1",
        DROVER_AGENT_CONTROLLER_NAME: "ctl",
        ...shared,
      });
      const pick = (s: {
        otlp?: unknown;
        stopAction: string;
        gracePeriodMs: number;
        caCertPem: string | undefined;
      }) => ({ otlp: s.otlp, stopAction: s.stopAction, gracePeriodMs: s.gracePeriodMs, caCertPem: s.caCertPem });
      const expected = pick(agent);
      for (const other of [controller, worker, node]) assert.deepEqual(pick(other), expected);
      if ("DROVER_AGENT_OTLP_ENDPOINT" in shared) {
        assert.deepEqual(expected, {
          otlp: {
            endpoint: "http://collector:4317",
            protocol: "grpc",
            traces: false,
            metrics: true,
            headers: {},
            serviceName: undefined,
            resourceAttributes: {},
            metricsIntervalMs: 60_000,
            sampler: "parentbased_always_on",
            samplerRatio: 1,
          },
          stopAction: "drain",
          gracePeriodMs: 300_000,
          caCertPem: pem,
        });
      } else {
        assert.deepEqual(expected, {
          otlp: undefined,
          stopAction: "graceful",
          gracePeriodMs: 120_000,
          caCertPem: undefined,
        });
      }
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test("a setting a driver cannot honour is refused, not ignored", () => {
  const hooks = mkdtempSync(join(tmpdir(), "drover-hooks-"));
  try {
    const refused = (env: Record<string, string>, setting: string, why: RegExp) =>
      assert.throws(
        () => loadAgentConfig({ DROVER_TOKEN: token, ...env }),
        (err: Error & { code?: string; setting?: string }) =>
          err.code === "invalid_setting" && err.setting === setting && why.test(err.message),
      );
    // A run's pod starts from the runner image: no agent-side hooks run there.
    refused(
      { DROVER_AGENT_DRIVER: "kubernetes", DROVER_AGENT_HOOKS_DIR: hooks },
      "DROVER_AGENT_HOOKS_DIR",
      /local and docker/,
    );
    refused(
      { DROVER_AGENT_DRIVER: "kubernetes", DROVER_AGENT_HOOK_TIMEOUT_SECONDS: "60" },
      "DROVER_AGENT_HOOK_TIMEOUT_SECONDS",
      /local and docker/,
    );
    // Each phase of a docker or Kubernetes run starts in a new container: nothing is kept between them.
    for (const driver of ["kubernetes", "docker"])
      refused(
        { DROVER_AGENT_DRIVER: driver, DROVER_AGENT_PLAN_REUSE_SECONDS: "60" },
        "DROVER_AGENT_PLAN_REUSE_SECONDS",
        /local driver only/,
      );
    assert.equal(loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_HOOKS_DIR: hooks }).hooksDir, hooks);
    assert.equal(
      loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_DRIVER: "docker", DROVER_AGENT_HOOKS_DIR: hooks }).hooksDir,
      hooks,
    );
    assert.equal(loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_PLAN_REUSE_SECONDS: "60" }).planReuseMs, 60_000);
  } finally {
    rmSync(hooks, { recursive: true, force: true });
  }
});
