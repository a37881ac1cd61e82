import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { spawnDrover, type Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { nodeWorkerEnv } from "./agents.js";

// I4: a quiet watch (a node worker with no runs) asks for bookmarks, so its resourceVersion
// follows the cluster's while nothing of its own changes: when its watch ends and resumes after
// other objects' changes have left the API server's watch history, it resumes instead of
// getting 410 and listing everything again. Its first list is served from the watch cache
// (resourceVersion=0).

const ns = "drover-bookmarks";
let cluster: TestCluster;
let home: string;
let worker: Proc | undefined;
const requests: string[] = [];

before(async () => {
  // A short watch history: 40 changes elsewhere push a quiet watch's version out of it.
  cluster = await startTestCluster({
    timings: fastTimings,
    watchHistory: 20,
    bookmarkIntervalMs: 100,
    namespaces: [ns, "churn"],
    onRequest: (method, url) => requests.push(`${method} ${url}`),
  });
  home = mkdtempSync(join(tmpdir(), "drover-bookmarks-"));
});

after(async () => {
  await worker?.stop("SIGKILL");
  await cluster?.close();
  rmSync(home, { recursive: true, force: true });
});

test("a quiet node worker's watch resumes across other objects' churn without a relist; its first list reads the watch cache", async () => {
  const podRequests = () => requests.filter((r) => r.startsWith(`GET /api/v1/namespaces/${ns}/pods?`));
  const lists = () => podRequests().filter((r) => !/[?&]watch=(1|true)/.test(r));
  const watches = () => podRequests().filter((r) => /[?&]watch=(1|true)/.test(r));
  worker = spawnDrover(["agent", "node-worker"], {
    PATH: process.env.PATH,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_NODE_HOME: home,
    DROVER_AGENT_LOG_FORMAT: "plain",
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS: "1",
    ...nodeWorkerEnv("bookmarks"),
  });
  await eventually("the first watch", async () => watches().length >= 1);
  assert.equal(lists().length, 1);
  assert.match(lists()[0]!, /[?&]resourceVersion=0(&|$)/, "the first list may come from the watch cache");
  assert.match(watches()[0]!, /[?&]allowWatchBookmarks=true(&|$)/);

  for (let i = 0; i < 40; i++)
    assert.equal(
      (await kube(cluster, "POST", "/api/v1/namespaces/churn/configmaps", { metadata: { name: `c${i}` } })).status,
      201,
    );
  // Each watch ends after a second and resumes: three more have come and gone.
  const after = watches().length;
  await eventually("three more watches", async () => watches().length >= after + 3, 30_000);
  assert.deepEqual(lists().length, 1, `relisted:\n${lists().join("\n")}\n${worker.output()}`);
  assert.doesNotMatch(worker.output(), /410|expired/i);
});
