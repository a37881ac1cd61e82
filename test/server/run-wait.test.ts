import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { queueRun } from "../support/agent-client.js";
import { eventually } from "../support/fault-runs.js";
import { startTestServer, type TestServer } from "../support/server.js";

// GET /runs/:id?wait=&status= answers once the run's status differs from `status`, or unchanged
// at the wait's end: the CLI's follow and the tests wait on it instead of polling.

let server: TestServer;
/** Listeners of run-changed events per run id, counted through the server's event bus. */
const listening = new Map<string, number>();
before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "waits" } });
  const bus = server.store.events;
  const subscribe = bus.subscribe.bind(bus);
  bus.subscribe = (topic, key, listener) => {
    const off = subscribe(topic, key, listener);
    if (topic !== "run-changed") return off;
    listening.set(key, (listening.get(key) ?? 0) + 1);
    return () => {
      listening.set(key, (listening.get(key) ?? 1) - 1);
      off();
    };
  };
});
after(() => server?.stop());

const archive = rawTarGz([{ path: "main.tf", content: "" }]);

describe("getRun ?wait=", { concurrency: true }, () => {
  test("answers once the status differs from the one given", async () => {
    const { runId } = await queueRun(server, "waits", "changes", archive);
    const before = (await server.api(routes.getRun, { params: { id: runId } })).body;
    const started = Date.now();
    const answer = server.api(routes.getRun, { params: { id: runId }, query: { wait: 25_000, status: before.status } });
    await eventually("the request to wait", async () => ((listening.get(runId) ?? 0) > 0 ? true : undefined));
    await server.api(routes.cancelRun, { params: { id: runId } });
    const res = await answer;
    assert.equal(res.status, 200);
    assert.equal(res.body.status, "canceled");
    assert.ok(Date.now() - started < 20_000, "answered at the change, not at the deadline");
    assert.equal(listening.get(runId), 0, "the request stopped listening");
  });

  test("without status, waits for a change from the status the run has when asked", async () => {
    const { runId } = await queueRun(server, "waits", "implicit", archive);
    const answer = server.api(routes.getRun, { params: { id: runId }, query: { wait: 25_000 } });
    await eventually("the request to wait", async () => ((listening.get(runId) ?? 0) > 0 ? true : undefined));
    await server.api(routes.cancelRun, { params: { id: runId } });
    assert.equal((await answer).body.status, "canceled");
  });

  test("answers at once when the status already differs", async () => {
    const { runId } = await queueRun(server, "waits", "differs", archive);
    const res = await server.api(routes.getRun, { params: { id: runId }, query: { wait: 25_000, status: "applied" } });
    assert.equal(res.status, 200);
    assert.notEqual(res.body.status, "applied");
    assert.equal(listening.get(runId) ?? 0, 0, "it never waited");
  });

  test("answers the unchanged run at the deadline", async () => {
    const { runId } = await queueRun(server, "waits", "unchanged", archive);
    const status = (await server.api(routes.getRun, { params: { id: runId } })).body.status;
    const started = Date.now();
    const res = await server.api(routes.getRun, { params: { id: runId }, query: { wait: 600, status } });
    const took = Date.now() - started;
    assert.equal(res.status, 200);
    assert.equal(res.body.status, status);
    assert.ok(took >= 600, `answered after ${took} ms, before the 600 ms wait`);
    assert.equal(listening.get(runId), 0, "the request stopped listening");
  });

  test("a bad wait or status is a 400; an unknown run a 404, also while waiting", async () => {
    const { runId } = await queueRun(server, "waits", "bad", archive);
    for (const query of [{ wait: "-1" }, { wait: "1.5" }, { wait: "soon" }, { wait: "50001" }, { status: "done" }]) {
      const res = await server.api(routes.getRun, {
        params: { id: runId },
        query: query as unknown as { wait: number },
      });
      assert.equal(res.status, 400, `${JSON.stringify(query)}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error, "bad_request");
    }
    const missing = await server.api(routes.getRun, { params: { id: "run-0000000000000000" }, query: { wait: 5_000 } });
    assert.equal(missing.status, 404);
  });
});
