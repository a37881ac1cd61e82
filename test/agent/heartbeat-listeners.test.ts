import assert from "node:assert/strict";
import { Agent, AgentClient, loadAgentConfig } from "@drover/agent";
import { getEventListeners } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { pino } from "pino";
import { until } from "../support/marked-processes.js";
import { startTestServer } from "../support/server.js";
import { routes } from "@drover/protocol";

// An agent that runs for weeks beats hundreds of thousands of times: no beat may leave a
// listener or a timer behind. The real agent against the real server, with a 2 ms beat.

test("the agent's heartbeat loop adds no abort listener per beat", async () => {
  const server = await startTestServer();
  const dir = mkdtempSync(join(tmpdir(), "drover-hb-"));
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on("warning", onWarning);
  const original = AgentClient.prototype.heartbeat;
  let beats = 0;
  AgentClient.prototype.heartbeat = function (this: AgentClient, ...args: Parameters<AgentClient["heartbeat"]>) {
    beats++;
    return original.apply(this, args);
  };
  try {
    await server.api(routes.createPool, { body: { name: "hb" } });
    const tok = await server.api(routes.createPoolToken, { params: { pool: "hb" }, body: { description: "hb" } });
    const config = loadAgentConfig({
      DROVER_TOKEN: tok.body.token,
      DROVER_URL: server.url,
      DROVER_AGENT_NAME: "hb",
      DROVER_AGENT_DATA_DIR: join(dir, "data"),
      DROVER_AGENT_CACHE_DIR: join(dir, "cache"),
      DROVER_AGENT_HEALTH_PORT: "0",
    });
    const agent = new Agent(config, pino({ level: "silent" }), { heartbeatMs: 2 });
    const done = agent.run();
    await until("10 beats", () => beats >= 10);
    const early = getEventListeners(agent.stopSignal, "abort").length;
    await until("300 beats", () => beats >= 300, 60_000);
    const late = getEventListeners(agent.stopSignal, "abort").length;
    assert.ok(late <= early + 2, `abort listeners grew from ${early} to ${late} over ${beats - 10} beats`);
    assert.ok(late < 10, `${late} abort listeners on the agent's stop signal`);
    await agent.stop();
    assert.equal(await done, 0);
    assert.deepEqual(
      warnings.filter((w) => w === "MaxListenersExceededWarning"),
      [],
    );
  } finally {
    AgentClient.prototype.heartbeat = original;
    process.off("warning", onWarning);
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
