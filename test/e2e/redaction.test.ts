import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { eventually } from "../support/fault-runs.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// Issue 25, security review N1, N7, N11: the forms in which the real terraform prints a
// sensitive value — word-wrapped in a diagnostic, Go's HTML-safe JSON, doubly escaped, a map key —
// never reach the log, the run, its jobs, the CLI, the outputs or the exported spans.

let stack: Stack;
let receiver: OtlpReceiver;

before(async () => {
  receiver = await startOtlpReceiver();
  stack = await startStack({ DROVER_OTLP_ENDPOINT: receiver.url });
  await stack.startAgent("redact-agent", { DROVER_AGENT_OTLP_ENDPOINT: receiver.url });
});
after(async () => {
  await stack?.stop();
  await receiver?.close();
});

async function workspace(name: string, variables: Record<string, { value: string; kind?: "env" | "terraform" }>) {
  assert.equal((await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } })).status, 201);
  for (const [key, v] of Object.entries(variables)) {
    const body = { value: v.value, kind: v.kind ?? "terraform", sensitive: true };
    const res = await stack.server.api(routes.setVariable, { params: { ws: name, key }, body });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
}

test("N1: a multi-word sensitive env var a failing local-exec echoes, wrapped by terraform, is redacted everywhere", async () => {
  // Longer than any line terraform's diagnostic has room for (78 columns when not on a
  // terminal), so the diagnostic splits it at one or more of its spaces wherever it starts.
  const secret = "correct horse battery staple zebra orbit lantern meadow quartz violin harbor pepper tundra walnut";
  const words = secret.split(" ");
  await workspace("wrapped", { DB_PASS: { value: secret, kind: "env" } });
  const dir = writeConfig(stack.dir, "wrapped", {
    "main.tf": [
      'resource "terraform_data" "db" {',
      '  provisioner "local-exec" {',
      '    command = "echo \\"psql: connection to db.internal.example.com failed, password $DB_PASS rejected\\"; exit 1"',
      "  }",
      "}",
      "",
    ].join("\n"),
  });
  const started = await stack.cli(["run", "start", dir, "--workspace", "wrapped", "--auto-apply"]);
  assert.equal(started.code, 1, started.stdout + started.stderr);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "wrapped" } })).body.items[0];
  assert.equal(run.status, "errored");
  const log = await runLog(stack.server, run.id, "apply");
  // The diagnostic did wrap the value: its words stand on more than one line of the log.
  assert.match(log, /Error running command/);
  assert.ok((log.match(/\*\*\*/g) ?? []).length >= 2, log);
  assert.match(run.errorMessage, /password\s+\*\*\*\s+rejected/);
  const jobs = (await stack.server.api(routes.listRunJobs, { params: { id: run.id } })).body;
  const span = await eventually("the server's span of the apply job", async () =>
    receiver.spans.find((s) => s.name === "job" && s.attributes["drover.job.id"] === run.applyJobId),
  );
  assert.match(span.statusMessage, /\*\*\*/);
  const traced = receiver.spans.filter((s) => s.traceId === span.traceId);
  const shown: Array<[string, string]> = [
    ["log", log],
    ["run", JSON.stringify((await stack.server.api(routes.getRun, { params: { id: run.id } })).body)],
    ["jobs", JSON.stringify(jobs)],
    ["run start", started.stdout + started.stderr],
    ["run show", (await stack.cli(["run", "show", run.id])).stdout],
    ["spans", JSON.stringify(traced.map((s) => [s.attributes, s.statusMessage]))],
  ];
  for (const [where, text] of shown) {
    // Any two consecutive words of the value, across whatever terraform put between them.
    for (let i = 0; i + 1 < words.length; i++) {
      const pair = new RegExp(`${words[i]}[\\s\\S]{1,8}${words[i + 1]}`);
      assert.doesNotMatch(text, pair, `${where}: ${text.slice(0, 2000)}`);
    }
  }
});

test("N7, N11: Go-escaped and doubly escaped JSON forms and map keys are redacted; the output is masked", async () => {
  const amp = "Tr0ub4dor&3<x>";
  const quoted = 'he said "quote\\" back\\slash-k9';
  const key = "S3cr3tKey-abc123";
  await workspace("escaped", { amp: { value: amp }, quoted: { value: quoted }, key: { value: key } });
  const dir = writeConfig(stack.dir, "escaped", {
    "main.tf": [
      'variable "amp" { type = string }',
      'variable "quoted" { type = string }',
      'variable "key" { type = string }',
      'resource "terraform_data" "m" { input = { (nonsensitive(var.key)) = "v" } }',
      'output "j" { value = nonsensitive(jsonencode({ password = var.amp })) }',
      'output "jsonenc" { value = nonsensitive(jsonencode({ k = var.quoted })) }',
      "",
    ].join("\n"),
  });
  const started = await stack.cli(["run", "start", dir, "--workspace", "escaped", "--auto-apply"]);
  assert.equal(started.code, 0, started.stdout + started.stderr);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "escaped" } })).body.items[0];
  const apply = await runLog(stack.server, run.id, "apply");
  // terraform printed the forms the review found, now redacted.
  assert.match(apply, /j = "\{\\"password\\":\\"\*\*\*\\"\}"/);
  assert.match(apply, /jsonenc = "\{\\"k\\":\\"\*\*\*\\"\}"/);
  const plan = JSON.stringify((await stack.server.api(routes.runPlan, { params: { id: run.id } })).body);
  const outputs = await stack.cli(["output", "--workspace", "escaped", "--json"]);
  const shown = [started.stdout, await runLog(stack.server, run.id, "plan"), apply, plan, outputs.stdout].join("\n");
  for (const leak of ["Tr0ub4dor", "he said", "slash-k9", key]) {
    assert.ok(!shown.includes(leak), `${leak} leaked: ${shown}`);
  }
  const parsed = JSON.parse(outputs.stdout) as Array<{ name: string; sensitive: boolean; value: unknown }>;
  for (const name of ["j", "jsonenc"]) {
    assert.deepEqual(
      parsed.find((o) => o.name === name),
      { name, sensitive: true, type: "string", value: null },
    );
  }
});
