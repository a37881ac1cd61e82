// The metrics of issue 16 provoked and read back: log bytes (the server's received count equals
// what the agent says it shipped and what the log holds), heartbeat round trips, and the
// agent's errors by kind — register, poll and heartbeat with the server cut off by a TCP proxy,
// log_upload when a log chunk cannot reach the server mid-run.
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { eventually } from "../support/fault-runs.js";
import { sampleValue, scrape } from "../support/metric-values.js";
import { freePort } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { routes } from "@drover/protocol";

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");

let stack: Stack;
let proxy: TcpProxy;
before(async () => {
  // Heartbeats every second, so a test sees some without waiting long.
  stack = await startStack({ DROVER_AGENT_HEARTBEAT_SECONDS: "1" });
  proxy = await startTcpProxy(stack.server.url);
});
after(async () => {
  await proxy?.close();
  await stack?.stop();
});

test("log bytes: the server's received count, the agent's shipped count and the stored logs agree; heartbeat round trips are recorded", async () => {
  const port = await freePort();
  const agent = await stack.startAgent("bytes", { DROVER_AGENT_HEALTH_PORT: String(port) });
  const metrics = `http://127.0.0.1:${port}/metrics`;
  await stack.server.api(routes.createWorkspace, { body: { name: "bytes-hello", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "bytes-hello", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"], 120_000)).status, "applied");
  const stored =
    Buffer.byteLength(await runLog(stack.server, runId, "plan")) +
    Buffer.byteLength(await runLog(stack.server, runId, "apply"));
  assert.ok(stored > 100, `the run logged ${stored} bytes`);
  const server = `${stack.server.url}/metrics`;
  assert.equal(
    (await scrape(server, "drover_log_bytes_received_total", { phase: "plan" }))! +
      (await scrape(server, "drover_log_bytes_received_total", { phase: "apply" }))!,
    stored,
  );
  assert.equal(await scrape(metrics, "drover_agent_log_bytes_shipped_total"), stored);
  // Heartbeats every second: some have been timed, each within the bucket bounds.
  const beats = await eventually(
    "a timed heartbeat",
    async () => ((await scrape(metrics, "drover_agent_heartbeat_duration_seconds_count"))! > 0 ? true : undefined),
    30_000,
  );
  assert.ok(beats);
  // One scrape for the three: a heartbeat a second lands between two scrapes.
  // eslint-disable-next-line no-restricted-globals -- the agent's own /metrics
  const exposition = await (await fetch(metrics)).text();
  const sum = sampleValue(exposition, "drover_agent_heartbeat_duration_seconds_sum")!;
  const count = sampleValue(exposition, "drover_agent_heartbeat_duration_seconds_count")!;
  assert.ok(sum > 0 && sum / count < 5, `mean heartbeat ${sum / count} s`);
  assert.equal(sampleValue(exposition, "drover_agent_heartbeat_duration_seconds_bucket", { le: "+Inf" }), count);
  assert.equal(await scrape(metrics, "drover_agent_errors_total"), undefined, "no error of any kind");
  await agent.stop("SIGTERM");
});

test("errors by kind: register, poll and heartbeat while the server is cut off, log_upload when a chunk cannot be delivered mid-run", async () => {
  const port = await freePort();
  const metrics = `http://127.0.0.1:${port}/metrics`;
  const errors = (kind: string) => scrape(metrics, "drover_agent_errors_total", { kind });
  proxy.set("refuse");
  const starting = stack.startAgent("cut-off", { DROVER_URL: proxy.url, DROVER_AGENT_HEALTH_PORT: String(port) });
  await eventually(
    "a failed registration",
    async () => ((await errors("register").catch(() => undefined)) ?? 0) >= 1 || undefined,
    30_000,
  );
  proxy.set("open");
  const agent = await starting;
  assert.equal(await errors("poll"), undefined);

  // Cut again while idle: the long poll and the next heartbeat both fail.
  proxy.set("refuse");
  await eventually(
    "failed polls and heartbeats",
    async () => (((await errors("poll")) ?? 0) >= 1 && ((await errors("heartbeat")) ?? 0) >= 1) || undefined,
    30_000,
  );
  // Both series from one exposition: the agent goes on failing polls between two scrapes.
  // eslint-disable-next-line no-restricted-globals -- the agent's /metrics, read once for both series
  const exposition = await (await fetch(metrics)).text();
  assert.equal(
    sampleValue(exposition, "drover_agent_poll_errors_total"),
    sampleValue(exposition, "drover_agent_errors_total", { kind: "poll" }),
    "the older poll-errors series counts the same failures",
  );
  proxy.set("open");

  // Mid-run: the provisioner writes a line only once the server is unreachable, then waits.
  const gate = join(stack.dir, "log-upload");
  const dir = writeConfig(stack.dir, "log-upload", {
    "main.tf": `resource "terraform_data" "x" {\n  provisioner "local-exec" {\n    command = "echo waiting; while [ ! -f ${gate}.speak ]; do sleep 0.1; done; echo spoken-while-cut-off; while [ ! -f ${gate}.go ]; do sleep 0.1; done"\n  }\n}\n`,
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "log-upload", pool: stack.pool } });
  const runId = await stack.startRun(dir, "log-upload", ["--auto-apply"]);
  await eventually(
    "the provisioner's first line in the log",
    async () => (/waiting/.test(await runLog(stack.server, runId, "apply").catch(() => "")) ? true : undefined),
    120_000,
  );
  const before = (await errors("log_upload")) ?? 0;
  proxy.set("refuse");
  writeFileSync(`${gate}.speak`, "");
  await eventually(
    "a log chunk retried",
    async () => ((await errors("log_upload")) ?? 0) > before || undefined,
    30_000,
  );
  proxy.set("open");
  writeFileSync(`${gate}.go`, "");
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"], 120_000)).status, "applied");
  assert.match(await runLog(stack.server, runId, "apply"), /spoken-while-cut-off/, "the retried chunk arrived");
  assert.ok(existsSync(`${gate}.go`));
  await agent.stop("SIGTERM");
});
