import assert from "node:assert/strict";
import { Agent, loadAgentConfig } from "@drover/agent";
import { routes } from "@drover/protocol";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { rawTarGz } from "../support/archives.js";
import { lookUntil } from "../support/poll.js";
import { startRouteFaultProxy, type RouteFault, type RouteFaultProxy } from "../support/route-fault-proxy.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { readPhaseLog, waitForRunStatus } from "../support/typed-api.js";

// The agent's large transfers of a job (the configuration down, the plan file up) against a
// peer that is slow, failing or silent: the real server, a real in-process agent with short
// deadlines, real terraform, and a proxy between them that misbehaves on one route.

const planUpload = /^\/api\/agent\/v1\/jobs\/[^/]+\/plan$/;
const configurationDownload = /^\/api\/agent\/v1\/jobs\/[^/]+\/configuration$/;
/** Incompressible, so the configuration archive and the plan file are each well over 100 kB. */
const blob = randomBytes(225_000).toString("base64");
const mainTf = `resource "terraform_data" "big" {\n  input = file("\${path.module}/blob.txt")\n}\n`;

let server: TestServer;
let dir: string;
let pools = 0;

before(async () => {
  server = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "drover-transfers-"));
  const tfrc = join(dir, "terraformrc");
  writeFileSync(tfrc, "");
  process.env.TF_CLI_CONFIG_FILE = tfrc;
  process.env.CHECKPOINT_DISABLE = "1";
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A pool of its own with one in-process agent behind `proxy`; the run planned there, not yet finished. */
async function planBehind(proxy: RouteFaultProxy, timeouts: Record<string, number>) {
  const pool = `transfers-${++pools}`;
  await server.api(routes.createPool, { body: { name: pool } });
  const tok = await server.api(routes.createPoolToken, { params: { pool }, body: { description: pool } });
  const config = loadAgentConfig({
    DROVER_TOKEN: tok.body.token,
    DROVER_URL: proxy.url,
    DROVER_AGENT_NAME: pool,
    DROVER_AGENT_DATA_DIR: join(dir, pool, "data"),
    DROVER_AGENT_CACHE_DIR: join(dir, pool, "cache"),
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  // A plain record: the deadlines this test gives are the agent's own, whatever their names.
  const agent = new Agent(config, pino({ level: "silent" }), { timeouts });
  const ended = agent.run();
  await server.api(routes.createWorkspace, { body: { name: pool, pool } });
  const cv = await server.api(routes.uploadConfiguration, {
    params: { ws: pool },
    body: rawTarGz([
      { path: "main.tf", content: mainTf },
      { path: "blob.txt", content: blob },
    ]),
  });
  assert.equal(cv.status, 201, JSON.stringify(cv.body));
  const run = await server.api(routes.createRun, { body: { workspace: pool, configurationVersionId: cv.body.id } });
  assert.equal(run.status, 201, JSON.stringify(run.body));
  const runId = run.body.id as string;
  return {
    runId,
    /** Waits for the run's status; on failure says where its plan log got to. */
    async reaches(statuses: string[], timeoutMs: number) {
      try {
        return await waitForRunStatus(server.url, server.adminToken, runId, statuses, timeoutMs);
      } catch (err) {
        const log = await readPhaseLog(server.url, server.adminToken, runId, "plan").catch(() => "");
        const said = log.split("\n").filter((line) => line.startsWith("[drover]"));
        throw new Error(`${(err as Error).message}; the agent's lines in the plan log:\n${said.join("\n")}`);
      }
    },
    planLog: () => readPhaseLog(server.url, server.adminToken, runId, "plan"),
    async stop() {
      // The second stop kills a job the first would let run on.
      void agent.stop();
      await agent.stop();
      await ended;
    },
  };
}

async function withProxy(faults: Array<[string, RegExp, RouteFault]>, body: (proxy: RouteFaultProxy) => Promise<void>) {
  const proxy = await startRouteFaultProxy(server.url);
  for (const [method, path, fault] of faults) proxy.set(method, path, fault);
  try {
    await body(proxy);
  } finally {
    await proxy.close();
  }
}

test("a plan file upload slower than the ordinary deadline, on a link faster than the minimum rate, completes", async () => {
  await withProxy([["PUT", planUpload, { kind: "slow upload", ms: 6_000 }]], async (proxy) => {
    // Per try: 3 s plus the plan file at 10 kB/s, over 13 s for the 100+ kB it is; the link takes 6 s.
    // (The server, the agent and the proxy share this process: the margins allow for a busy machine.)
    const run = await planBehind(proxy, { requestMs: 3_000, transferBytesPerSecond: 10_000 });
    try {
      await run.reaches(["planned"], 40_000);
      assert.ok(proxy.hits[0]!.bodyBytes > 100_000, `the plan file was only ${proxy.hits[0]!.bodyBytes} bytes`);
      assert.equal(proxy.hits.length, 1, "the upload was given up and sent again");
    } finally {
      await run.stop();
    }
  });
});

test("a configuration download that keeps coming, slower than the ordinary deadline, completes", async () => {
  await withProxy([["GET", configurationDownload, { kind: "slow download", ms: 6_000 }]], async (proxy) => {
    // Bytes come every 100 ms: never 3 s without one, though the whole takes 6 s.
    const run = await planBehind(proxy, { requestMs: 3_000 });
    try {
      await run.reaches(["planned"], 40_000);
      assert.equal(proxy.hits.length, 1, "the download was given up and asked for again");
    } finally {
      await run.stop();
    }
  });
});

test("a plan file upload the server keeps failing is given up after the retry budget: the run errors, naming it", async (t) => {
  await withProxy([["PUT", planUpload, { kind: "fail", status: 500 }]], async (proxy) => {
    const run = await planBehind(proxy, { transferRetryMs: 2_000 });
    try {
      const ended = await run.reaches(["errored"], 40_000);
      t.diagnostic(`the run's error: ${ended.errorMessage}`);
      assert.ok(proxy.hits.length >= 2, `tried ${proxy.hits.length} times`);
      assert.match(ended.errorMessage ?? "", /gave up uploading the plan file after \d+ tries in \d+ s: .*HTTP 500/);
      assert.match(await run.planLog(), /errored in stage uploads .*gave up uploading the plan file/);
    } finally {
      await run.stop();
    }
  });
});

test("a cancel aborts a plan file upload in flight at once: the run is canceled, the connection closed", async () => {
  await withProxy([["PUT", planUpload, { kind: "stall" }]], async (proxy) => {
    // The ordinary deadlines: only the cancel can end this upload within the test.
    const run = await planBehind(proxy, {});
    try {
      await lookUntil("the plan file upload to stall", () => (proxy.open > 0 ? true : undefined), {
        timeoutMs: 60_000,
      });
      const canceled = await server.api(routes.cancelRun, { params: { id: run.runId } });
      assert.equal(canceled.status, 200, JSON.stringify(canceled.body));
      await run.reaches(["canceled"], 15_000);
      await lookUntil("the agent to drop the stalled upload", () => (proxy.open === 0 ? true : undefined), {
        timeoutMs: 5_000,
      });
      assert.equal(proxy.hits.length, 1);
    } finally {
      await run.stop();
    }
  });
});
