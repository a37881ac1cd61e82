import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { markedProcesses, until } from "../support/marked-processes.js";
import type { Proc } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { routes } from "@drover/protocol";

// Faults between the agent and the server, and processes that must not outlive their job: the
// real server, real agents (some behind a TCP proxy the test cuts), real terraform. Every
// process a test starts carries FAULT_MARK in its environment (terraform and its provisioners
// inherit it), so the test can find any of them that survive.

const leaseTtlSeconds = 3;
let stack: Stack;
let proxy: TcpProxy;

before(async () => {
  stack = await startStack({ DROVER_LEASE_TTL_SECONDS: String(leaseTtlSeconds) });
  proxy = await startTcpProxy(stack.server.url);
});
after(async () => {
  await proxy?.close();
  await stack?.stop();
});

async function workspace(name: string) {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

function marked(mark: string, agent?: Proc) {
  return markedProcesses(mark, {
    name: "FAULT_MARK",
    exclude: agent?.child.pid !== undefined ? [agent.child.pid] : [],
  });
}

/** A provisioner that records its begin and end in `ledger` around a long sleep. */
function ledgerConfig(ledger: string, seconds: number, input = "x") {
  return {
    "main.tf":
      `resource "terraform_data" "x" {\n  input = "${input}"\n  provisioner "local-exec" {\n    command = "echo begin $DROVER_RUN_ID >> ${ledger}; sleep ${seconds}; echo end $DROVER_RUN_ID >> ${ledger}"\n  }\n}\n` +
      `output "x" {\n  value = terraform_data.x.output\n}\n`,
  };
}

function ledgerLines(ledger: string): string[] {
  return existsSync(ledger) ? readFileSync(ledger, "utf8").trim().split("\n").filter(Boolean) : [];
}

async function waitForLog(runId: string, phase: "plan" | "apply", pattern: RegExp) {
  await until(`log matching ${pattern}`, async () => pattern.test(await runLog(stack.server, runId, phase)), 60_000);
}

test("SIGTERM while the server is unreachable: the agent ends within its stop budget, exit 0, one line per undelivered item; the lease expiry errors the job", async () => {
  await workspace("unreachable");
  proxy.set("open");
  const agent = await stack.startAgent("unreachable-agent", {
    DROVER_URL: proxy.url,
    DROVER_AGENT_WORKER_ON_STOP_ACTION: "force",
    DROVER_AGENT_GRACE_PERIOD_SECONDS: "10",
    FAULT_MARK: "unreachable",
  });
  const ledger = join(stack.dir, "unreachable.ledger");
  const runId = await stack.startRun(writeConfig(stack.dir, "unreachable", ledgerConfig(ledger, 60)), "unreachable", [
    "--auto-apply",
  ]);
  await until("the provisioner to begin", () => ledgerLines(ledger).length > 0, 90_000);
  proxy.set("blackhole");
  const started = Date.now();
  agent.child.kill("SIGTERM");
  const exit = await agent.exited;
  const elapsed = Date.now() - started;
  const out = agent.output();
  assert.equal(exit.code, 0, out);
  // force: a 10 s budget; the allowance covers the process's own start-up and exit on a loaded machine.
  assert.ok(elapsed < 10_000 + 2_500, `stopping took ${elapsed} ms:\n${out}`);
  const undelivered = out.split("\n").filter((l) => l.includes('"undelivered"'));
  assert.equal(undelivered.filter((l) => /finish undelivered \(outcome errored\)/.test(l)).length, 1, out);
  assert.equal(undelivered.filter((l) => /\d+ log bytes undelivered/.test(l)).length, 1, out);
  assert.equal(undelivered.filter((l) => /deregistration undelivered/.test(l)).length, 1, out);
  assert.deepEqual(marked("unreachable"), [], "no process of the job survives the agent");
  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 30_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /agent lost/);
  proxy.set("open");
});

test("the network cut for twice the lease TTL: the agent stops its work on the lost lease and never writes over the newer run's state", async () => {
  await workspace("partition");
  proxy.set("open");
  const cutAgent = await stack.startAgent("partitioned", { DROVER_URL: proxy.url, FAULT_MARK: "partition" });
  const ledger = join(stack.dir, "partition.ledger");
  const first = await stack.startRun(
    writeConfig(stack.dir, "partition-a", ledgerConfig(ledger, 60, "first")),
    "partition",
    ["--auto-apply"],
  );
  await until("the first run's provisioner to begin", () => ledgerLines(ledger).length > 0, 90_000);
  proxy.set("blackhole");
  const cutAt = Date.now();
  const lost = await stack.waitForRun(first, ["errored", "applied", "canceled"], 30_000);
  assert.equal(lost.status, "errored");
  assert.match(lost.errorMessage ?? "", /agent lost/);
  // A newer run on the same workspace completes elsewhere while the partition lasts.
  const other = await stack.startAgent("partition-other", { FAULT_MARK: "partition-other" });
  const second = await stack.startRun(
    writeConfig(stack.dir, "partition-b", ledgerConfig(ledger, 0, "second")),
    "partition",
    ["--auto-apply"],
  );
  assert.equal((await stack.waitForRun(second, ["applied", "errored"], 90_000)).status, "applied");
  await until("twice the lease TTL since the cut", () => Date.now() - cutAt >= 2 * leaseTtlSeconds * 1000);
  proxy.set("open");
  await cutAgent.waitFor(/lost the job's lease/, 60_000);
  await until("the first run's processes to end", () => marked("partition", cutAgent).length === 0);
  const lines = ledgerLines(ledger);
  assert.ok(!lines.includes(`end ${first}`), `the first run's provisioner went on: ${lines.join(", ")}`);
  const outputs = (await stack.server.api(routes.workspaceOutputs, { params: { ws: "partition" } })).body;
  assert.deepEqual(
    outputs.items.map((o: any) => o.value),
    ["second"],
    "the state is the newer run's",
  );
  const state = await stack.server.api(routes.getRun, { params: { id: first } });
  assert.equal(state.body.status, "errored", "the lost run stays errored");
  await other.stop();
  await cutAgent.stop();
});

test("the agent killed (-9) mid-apply and restarted: no process of the old job survives the restart; the provisioner never runs twice at once", async () => {
  await workspace("crash");
  const ledger = join(stack.dir, "crash.ledger");
  const agent = await stack.startAgent("crashy", { FAULT_MARK: "crash" });
  const first = await stack.startRun(writeConfig(stack.dir, "crash-a", ledgerConfig(ledger, 40)), "crash", [
    "--auto-apply",
  ]);
  await until("the provisioner to begin", () => ledgerLines(ledger).length > 0, 90_000);
  await agent.stop("SIGKILL");
  assert.ok(
    marked("crash").some((p) => /sleep 40/.test(p.cmdline)),
    "the dead agent's provisioner still runs (what the restart must end)",
  );
  assert.equal((await stack.waitForRun(first, ["errored", "applied"], 30_000)).status, "errored");
  const second = await stack.startRun(writeConfig(stack.dir, "crash-b", ledgerConfig(ledger, 1)), "crash", [
    "--auto-apply",
  ]);
  const restarted = await stack.startAgent("crashy", { FAULT_MARK: "crash" });
  try {
    // Registered means the old processes are gone: the agent ends them before it takes work.
    await restarted.waitFor(/"msg":"registered"/);
    assert.match(restarted.output(), /ended processes left behind/);
    assert.deepEqual(
      marked("crash", restarted).filter((p) => /sleep 40/.test(p.cmdline)),
      [],
    );
    assert.equal((await stack.waitForRun(second, ["applied", "errored"], 90_000)).status, "applied");
    assert.deepEqual(ledgerLines(ledger), [`begin ${first}`, `begin ${second}`, `end ${second}`]);
  } finally {
    await restarted.stop();
  }
});

describe("no grandchild outlives its job", () => {
  for (const how of ["cancel", "graceful stop"] as const) {
    test(`${how}: the provisioner's sleep is gone when the run ends`, async () => {
      const name = how === "cancel" ? "orphan-cancel" : "orphan-stop";
      await workspace(name);
      const agent = await stack.startAgent(`${name}-agent`, {
        FAULT_MARK: name,
        DROVER_AGENT_WORKER_ON_STOP_ACTION: "graceful",
        DROVER_AGENT_GRACE_PERIOD_SECONDS: "30",
      });
      const runId = await stack.startRun(
        writeConfig(stack.dir, name, {
          "main.tf":
            'resource "terraform_data" "s" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "sleep 40"\n  }\n}\n',
        }),
        name,
        ["--auto-apply"],
      );
      await stack.waitForRun(runId, ["applying"]);
      await waitForLog(runId, "apply", /local-exec/);
      await until("the provisioner's sleep to run", () => marked(name, agent).some((p) => /sleep 40/.test(p.cmdline)));
      if (how === "cancel") {
        const res = await stack.cli(["run", "cancel", runId]);
        assert.equal(res.code, 0, res.stderr);
        assert.ok(
          ["canceled", "errored"].includes(
            (await stack.waitForRun(runId, ["canceled", "errored", "applied"], 60_000)).status,
          ),
        );
        // The job has ended: it reported its outcome only after ending its processes.
        assert.deepEqual(marked(name, agent), []);
        await agent.stop();
      } else {
        agent.child.kill("SIGTERM");
        assert.equal((await agent.exited).code, 0, agent.output());
        assert.deepEqual(marked(name), []);
        assert.equal((await stack.waitForRun(runId, ["canceled", "errored", "applied"], 60_000)).status, "errored");
      }
    });
  }
});
