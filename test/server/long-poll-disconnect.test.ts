import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, test } from "node:test";
import { agentApi, routes } from "@drover/protocol";
import { store } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { eventually } from "../support/fault-runs.js";
import { startTestServer, type TestServer } from "../support/server.js";

// A long-poll whose client went away leaves the pool's waiters at once (http/auth.ts
// requestSignal): were it still there, the next queued job would wake it, the oldest waiter,
// and be claimed for an agent that is gone, while a live poller kept waiting.

let server: TestServer;
let poolId: string;
before(async () => {
  server = await startTestServer();
  poolId = (await server.api(routes.createPool, { body: { name: "gone" } })).body.id as string;
});
after(() => server?.stop());

const waiting = () => store.poolWaiters(server.store.events).waiting(poolId);

test("a long-poll whose client disconnects stops waiting; the next job goes to a poller still there", async () => {
  const departed = await registerAgent(server, "gone", "departed");
  const live = await registerAgent(server, "gone", "live");
  const url = new URL(`${routes.pollJob.path}?wait=25000`, server.url);
  assert.ok(url.pathname.startsWith(agentApi));
  const req = request(url, {
    method: routes.pollJob.method,
    headers: { authorization: `Bearer ${departed.session}`, "content-length": "0" },
  });
  req.on("error", () => undefined);
  req.end();
  await eventually("the departed agent's poll to wait", async () => (waiting() === 1 ? true : undefined));
  req.destroy();
  await eventually("the departed agent's poll to stop waiting", async () => (waiting() === 0 ? true : undefined));

  const polling = call(server, routes.pollJob, live.session, { query: { wait: 25000 } });
  await eventually("the live agent's poll to wait", async () => (waiting() === 1 ? true : undefined));
  const { runId } = await queueRun(server, "gone", "gone-ws", rawTarGz([{ path: "main.tf", content: "" }]));
  const res = await polling;
  assert.equal(res.status, 200);
  assert.equal(res.body.job?.runId, runId);
});
