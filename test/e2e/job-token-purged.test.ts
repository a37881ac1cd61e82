import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { markedProcesses, until } from "../support/marked-processes.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { routes } from "@drover/protocol";

// An agent back from a partition longer than its lease plus DROVER_JOB_TOKEN_RETENTION_SECONDS
// finds its job's token deleted: the server answers 401 `unauthorized`, not `job_finished`. The
// real server, a real agent behind a TCP proxy the test cuts, real terraform.

const leaseTtlSeconds = 3;
let stack: Stack;
let proxy: TcpProxy;

before(async () => {
  stack = await startStack({
    DROVER_LEASE_TTL_SECONDS: String(leaseTtlSeconds),
    DROVER_JOB_TOKEN_RETENTION_SECONDS: "0",
  });
  proxy = await startTcpProxy(stack.server.url);
});
after(async () => {
  await proxy?.close();
  await stack?.stop();
  // A job the agent failed to stop must not outlive the test.
  for (const p of marked()) process.kill(p.pid, "SIGKILL");
});

/** The live processes of this file's jobs (terraform, its provisioner): each carries FAULT_MARK. */
function marked(agent?: { child: { pid?: number | undefined } }) {
  const pid = agent?.child.pid;
  return markedProcesses("purged", { name: "FAULT_MARK", exclude: pid === undefined ? [] : [pid] });
}

/** A provisioner that records its begin and end in `ledger` around a sleep of `seconds`. */
function ledgerConfig(ledger: string, seconds: number, input: string) {
  return {
    "main.tf": `resource "terraform_data" "x" {\n  input = "${input}"\n  provisioner "local-exec" {\n    command = "echo begin $DROVER_RUN_ID >> ${ledger}; sleep ${seconds}; echo end $DROVER_RUN_ID >> ${ledger}"\n  }\n}\n`,
  };
}

function ledgerLines(ledger: string): string[] {
  return existsSync(ledger) ? readFileSync(ledger, "utf8").trim().split("\n").filter(Boolean) : [];
}

async function jobTokensLeft(): Promise<number> {
  const row = await stack.server.store.db
    .selectFrom("job_tokens")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

test("the job's tokens purged while the agent was cut off: the agent stops the job on the 401, kills terraform and takes the next job", async () => {
  const created = await stack.server.api(routes.createWorkspace, { body: { name: "purged", pool: stack.pool } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const agent = await stack.startAgent("purged-agent", { DROVER_URL: proxy.url, FAULT_MARK: "purged" });
  const ledger = join(stack.dir, "purged.ledger");
  const first = await stack.startRun(writeConfig(stack.dir, "purged-a", ledgerConfig(ledger, 120, "first")), "purged", [
    "--auto-apply",
  ]);
  await until("the first run's provisioner to begin", () => ledgerLines(ledger).length > 0, 90_000);
  proxy.set("blackhole");
  const lost = await stack.waitForRun(first, ["errored", "applied", "canceled"], 30_000);
  assert.equal(lost.status, "errored");
  await until("the sweeper to delete the lost job's tokens", async () => (await jobTokensLeft()) === 0);
  proxy.set("open");

  // Without a fix terraform goes on: its 120 s sleep outlasts this deadline.
  await until("the first run's processes to end", () => marked(agent).length === 0, 30_000);
  await agent.waitFor(/no longer knows this job's token/, 10_000);
  assert.ok(
    !ledgerLines(ledger).includes(`end ${first}`),
    `the provisioner went on: ${ledgerLines(ledger).join(", ")}`,
  );

  // Its one slot is free again: the next run lands on this agent (the only one) and completes.
  const second = await stack.startRun(writeConfig(stack.dir, "purged-b", ledgerConfig(ledger, 0, "second")), "purged", [
    "--auto-apply",
  ]);
  assert.equal((await stack.waitForRun(second, ["applied", "errored"], 60_000)).status, "applied");
  assert.ok(ledgerLines(ledger).includes(`end ${second}`));
  const out = agent.output();
  assert.equal(out.match(/no longer knows this job's token/g)?.length, 1, "one message for the lost job");
  await agent.stop();
});
