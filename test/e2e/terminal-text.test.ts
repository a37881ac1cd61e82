import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// Issue 25, security review N9: what a run writes (its log, its outputs' names) is shown by the
// real CLI with its terminal escapes made visible, never executed; plain newlines and tabs stay.

let stack: Stack;

before(async () => {
  stack = await startStack();
  await stack.startAgent("text-agent");
});
after(() => stack?.stop());

/** A byte a terminal acts on: ESC, BEL, C1 controls, a lone CR, a bidi override. */
// eslint-disable-next-line no-control-regex
const acted = /[\u001b\u0007\u0080-\u009f\u202a-\u202e]|\r(?!\n)/;

test("N9: escapes a run prints are made visible by run start, run logs, run logs --follow and output", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "escapes", pool: stack.pool } })).status,
    201,
  );
  const dir = writeConfig(stack.dir, "escapes", {
    "main.tf": [
      'resource "terraform_data" "x" {',
      '  provisioner "local-exec" {',
      "    command = \"printf 'clip \\\\033]52;c;cHduZWQ=\\\\007 wipe \\\\033[2J\\\\tfake\\\\r[drover] apply succeeded\\\\n'\"",
      "  }",
      "}",
      'output "o" { value = "plain" }',
      "",
    ].join("\n"),
  });
  const started = await stack.cli(["run", "start", dir, "--workspace", "escapes", "--auto-apply"]);
  assert.equal(started.code, 0, started.stdout + started.stderr);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "escapes" } })).body.items[0];
  const logs = await stack.cli(["run", "logs", run.id]);
  const followed = await stack.cli(["run", "logs", run.id, "--follow"]);
  for (const [what, out] of [
    ["run start", started.stdout],
    ["run logs", logs.stdout],
    ["run logs --follow", followed.stdout],
  ]) {
    assert.ok(!acted.test(out!), `${what}: ${JSON.stringify(out)}`);
    // The sequences are there to be read; layout is not touched.
    assert.match(
      out!,
      /clip \\u\{1b\}\]52;c;cHduZWQ=\\u\{7\} wipe \\u\{1b\}\[2J\tfake/,
      `${what}: ${JSON.stringify(out)}`,
    );
    assert.match(out!, /\n/);
  }

  // A state written through terraform's backend may name its outputs anything: printed safely.
  const current = await stack.server.api(routes.readState, { params: { ws: "escapes" } });
  const state = current.body as {
    serial: number;
    outputs: Record<string, unknown>;
  };
  state.serial += 1;
  state.outputs = { "evil\u001b]0;PWNED\u0007\u001b[2J": { value: "a\u202eb\u009bc", type: "string" } };
  const written = await stack.server.api(routes.writeState, {
    params: { ws: "escapes" },
    body: Buffer.from(JSON.stringify(state)),
  });
  assert.equal(written.status, 200, JSON.stringify(written.body));
  for (const args of [[], ["--json"]]) {
    const out = await stack.cli(["output", "--workspace", "escapes", ...args]);
    assert.equal(out.code, 0, out.stderr);
    assert.ok(!acted.test(out.stdout), JSON.stringify(out.stdout));
    assert.match(out.stdout, /evil\\+u(\{1b\}|001b)\]0;PWNED/);
  }
});

test("N9: a job cannot upload an output name holding a control character (400)", async () => {
  assert.equal((await stack.server.api(routes.createPool, { body: { name: "names" } })).status, 201);
  const agent = await registerAgent(stack.server, "names", "fake");
  await queueRun(stack.server, "names", "names", rawTarGz([{ path: "main.tf", content: "" }]), { autoApply: true });
  // Only an apply job may upload outputs: the plan job ends with changes, the apply job uploads.
  const plan = (await call(stack.server, routes.pollJob, agent.session, { query: { wait: 2000 } })).body.job;
  assert.equal(
    (
      await call(stack.server, routes.startJob, plan.jobToken, {
        params: { id: plan.jobId },
        body: { starter: "test" },
      })
    ).status,
    200,
  );
  const planSummary = { add: 1, change: 0, destroy: 0, hasChanges: true };
  const finished = await call(stack.server, routes.finishJob, plan.jobToken, {
    params: { id: plan.jobId },
    body: { outcome: "succeeded", planSummary },
  });
  assert.equal(finished.status, 204, JSON.stringify(finished.body));
  const job = (await call(stack.server, routes.pollJob, agent.session, { query: { wait: 2000 } })).body.job;
  assert.equal(job.phase, "apply");
  assert.equal(
    (await call(stack.server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );
  const put = (name: string) =>
    call(stack.server, routes.uploadOutputs, job.jobToken, {
      params: { id: job.jobId },
      body: { outputs: [{ name, sensitive: false, type: "string", value: "v" }] },
    });
  for (const name of ["evil\u001b]0;PWNED\u0007", "line\nbreak", "rtl\u202eeman"]) {
    const res = await put(name);
    assert.equal(res.status, 400, `${JSON.stringify(name)}: ${JSON.stringify(res.body)}`);
  }
  assert.equal((await put("fine_name")).status, 204);
});

test("run list shows each run's workspace by name", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "listed-ws", pool: stack.pool } })).status,
    201,
  );
  const dir = writeConfig(stack.dir, "listed", { "main.tf": "" });
  const runId = await stack.startRun(dir, "listed-ws", ["--plan-only"]);
  const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "listed-ws" } })).body;
  const listed = await stack.cli(["run", "list", "--workspace", "listed-ws"]);
  assert.equal(listed.code, 0, listed.stderr);
  const row = listed.stdout.split("\n").find((l) => l.startsWith(runId));
  assert.ok(row, listed.stdout);
  assert.match(row, /^\S+\s+listed-ws\s/);
  assert.ok(!listed.stdout.includes(ws.id), listed.stdout);
});
