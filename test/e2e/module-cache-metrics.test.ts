// The module cache's counters on a running agent's /metrics: two runs calling the same
// registry module — the first fetches it (a miss), the second uses the cached entry (a hit).
// (The provider cache's counters are read the same way in provider-cache.test.ts.)
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { scrape } from "../support/metric-values.js";
import { freePort } from "../support/processes.js";
import { startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

let stack: Stack;
let registry: TestRegistry;
before(async () => {
  stack = await startStack();
  registry = await startProviderRegistry(
    [],
    [{ name: "thing", versions: ["1.0.0"], files: { "main.tf": 'output "v" { value = "thing-VERSION" }\n' } }],
  );
});
after(async () => {
  await stack?.stop();
  await registry?.close();
});

test('module cache: a miss for the first run of a module version, a hit for the next, on /metrics under cache="modules"', async () => {
  const port = await freePort();
  const metrics = `http://127.0.0.1:${port}/metrics`;
  const agent = await stack.startAgent("modules", {
    DROVER_AGENT_HEALTH_PORT: String(port),
    DROVER_AGENT_MODULE_CACHE_ENABLED: "true",
    DROVER_CA_CERT: registry.caFile,
  });
  const counts = async () => ({
    hits: await scrape(metrics, "drover_agent_cache_hits_total", { cache: "modules" }),
    misses: await scrape(metrics, "drover_agent_cache_misses_total", { cache: "modules" }),
  });
  assert.deepEqual(await counts(), { hits: 0, misses: 0 });
  for (const [i, expected] of [
    { hits: 0, misses: 1 },
    { hits: 1, misses: 1 },
  ].entries()) {
    const ws = `modules-${i}`;
    await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } });
    const dir = writeConfig(stack.dir, ws, {
      "main.tf": `module "m" {\n  source  = "${registry.host}/drover/thing/null"\n  version = "1.0.0"\n}\noutput "v" { value = module.m.v }\n`,
    });
    const runId = await stack.startRun(dir, ws, ["--plan-only"]);
    const run = await stack.waitForRun(runId, ["planned_and_finished", "errored", "failed"], 120_000);
    const log = await runLog(stack.server, runId, "plan");
    assert.equal(run.status, "planned_and_finished", log);
    assert.match(log, /modules from the agent's cache: m \(/);
    assert.deepEqual(await counts(), expected, `after run ${i + 1}`);
  }
  assert.equal(registry.downloads.get("module-thing-1.0.0.tar.gz"), 1, "one download");
  await agent.stop("SIGTERM");
});
