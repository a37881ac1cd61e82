import assert from "node:assert/strict";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { pollWait } from "../support/poll.js";
import { runLog } from "../support/stack.js";
import { onPath, startTerraformCloud, type TerraformCloud } from "../support/terraform-cloud.js";

/*
 * Remote runs with the real terraform 1.11.4 and its `cloud` block, over plain HTTP through a
 * CLI config `host` block, on a real server and a real agent: speculative plans with
 * -detailed-exitcode, applies confirmed and refused on stdin, -auto-approve, -var, -target,
 * -replace, -refresh-only, -destroy, Ctrl-C, and the same workspace used by `drover run start`
 * in between, with one state history and one queue.
 */

let tc: TerraformCloud;
before(async () => {
  tc = await startTerraformCloud();
  await tc.stack.startAgent("cloud-agent");
});
after(() => tc?.stop());

const main = `
variable "greeting" {
  type    = string
  default = "hello"
}
variable "b-input" {
  type    = string
  default = "b"
}
resource "terraform_data" "a" { input = var.greeting }
resource "terraform_data" "b" { input = var.b-input }
output "greeting" { value = var.greeting }
`;

async function runs(
  workspace: string,
): Promise<{ id: string; status: string; planOnly: boolean; savedPlan: boolean; configurationVersionId: string }[]> {
  const res = await tc.stack.server.api(routes.listRuns, { query: { workspace } });
  return res.body.items;
}

async function outputs(workspace: string): Promise<Record<string, unknown>> {
  const res = await tc.stack.server.api(routes.workspaceOutputs, { params: { ws: workspace }, query: {} });
  return Object.fromEntries(res.body.items.map((o: { name: string; value: unknown }) => [o.name, o.value]));
}

async function stateSerial(workspace: string): Promise<number | null> {
  const res = await tc.stack.server.api(routes.readState, { params: { ws: workspace } });
  return res.status === 200 ? (res.body as { serial: number }).serial : null;
}

describe("terraform with a cloud block runs remotely on Drover", () => {
  let dir: string;
  const ws = "remote";

  test("init, then a speculative plan: streamed, -detailed-exitcode 2, capability URLs without a token", async () => {
    dir = tc.config("remote", { name: ws }, { "main.tf": main });
    const init = await tc.terraform(["init", "-input=false"], dir);
    assert.equal(init.code, 0, init.output);
    tc.requests.length = 0;
    const plan = await tc.terraform(["plan", "-detailed-exitcode"], dir);
    assert.equal(plan.code, 2, plan.output);
    assert.match(plan.output, /terraform_data\.a will be created/);
    assert.match(plan.output, /Plan: 2 to add, 0 to change, 0 to destroy/);
    assert.match(plan.output, /\[drover\] plan of run run-/, "the agent's log reached the CLI");
    const [run] = await runs(ws);
    assert.equal(run?.status, "planned_and_finished");
    assert.equal(run?.planOnly, true, "a speculative configuration version only plans");
    const upload = tc.requests.find((r) => r.method === "PUT" && r.url.includes("/upload/"));
    assert.equal(upload?.authorized, false);
    const logReads = tc.requests.filter((r) => r.url.includes("/logs/"));
    assert.ok(logReads.length > 0 && logReads.every((r) => !r.authorized), "log reads carry no token");
    assert.ok(tc.requests.some((r) => r.url.endsWith("/run-events")));
    assert.equal(await stateSerial(ws), null, "a plan writes no state");
  });

  test("apply answered `no` discards the run; answered `yes` applies it, its first lines shown", async () => {
    const no = await tc.terraform(["apply"], dir, { input: "no\n" });
    assert.equal(no.code, 1, no.output);
    assert.match(no.output, /Apply discarded/);
    assert.equal((await runs(ws))[0]?.status, "discarded");
    assert.equal(await stateSerial(ws), null);

    const yes = await tc.terraform(["apply"], dir, { input: "yes\n" });
    assert.equal(yes.code, 0, yes.output);
    assert.match(yes.output, /Do you want to perform these actions in workspace "remote"\?/);
    assert.match(yes.output, /Apply complete! Resources: 2 added, 0 changed, 0 destroyed/);
    assert.match(yes.output, /\[drover\] apply of run run-/, "the apply's first line is not dropped");
    assert.doesNotMatch(yes.output, /Drover apply of run/, "the three lines terraform skips");
    assert.equal((await runs(ws))[0]?.status, "applied");
    assert.deepEqual(await outputs(ws), { greeting: "hello" });
  });

  test("nothing to change: -detailed-exitcode 0; -refresh=false plans without reading the resources", async () => {
    const plan = await tc.terraform(["plan", "-detailed-exitcode"], dir);
    assert.equal(plan.code, 0, plan.output);
    assert.match(plan.output, /No changes/);
    assert.match(plan.output, /terraform_data\.a: Refreshing state/);
    const runsBefore = (await runs(ws)).length;
    const unrefreshed = await tc.terraform(["plan", "-refresh=false", "-detailed-exitcode"], dir);
    assert.equal(unrefreshed.code, 0, unrefreshed.output);
    assert.match(unrefreshed.output, /No changes/);
    assert.doesNotMatch(unrefreshed.output, /Refreshing state/);
    const [run] = await tc.stack.server
      .api(routes.listRuns, { query: { workspace: ws, limit: 1 } })
      .then((r) => r.body.items);
    assert.equal(run.refresh, false);
    assert.equal((await runs(ws)).length, runsBefore + 1);
    // A saved plan with nothing to change ends there: its file has nothing to apply.
    const saved = await tc.terraform(["plan", "-out=nothing.tfplan"], dir);
    assert.equal(saved.code, 0, saved.output);
    assert.equal((await runs(ws))[0]?.status, "planned_and_finished");
    const apply = await tc.terraform(["apply", "nothing.tfplan"], dir);
    assert.equal(apply.code, 1, apply.output);
    assert.match(apply.output, /Saved plan has no changes/);
  });

  test("-auto-approve with -var and -target: only the target changes, to the run's value", async () => {
    // A variable's name may hold '-', as terraform's own names may.
    const apply = await tc.terraform(
      ["apply", "-auto-approve", "-var", "greeting=bonjour", "-var", "b-input=b", "-target=terraform_data.a"],
      dir,
    );
    assert.equal(apply.code, 0, apply.output);
    assert.match(apply.output, /Resources: 0 added, 1 changed, 0 destroyed/);
    assert.doesNotMatch(apply.output, /terraform_data\.b/);
  });

  test("-replace replaces; -refresh-only changes nothing but the state", async () => {
    const replace = await tc.terraform(["apply", "-auto-approve", "-replace=terraform_data.b"], dir);
    assert.equal(replace.code, 0, replace.output);
    assert.match(replace.output, /terraform_data\.b will be replaced, as requested/);
    // The targeted run left the output at its old value; this one, without -var, sets greeting back.
    assert.match(replace.output, /Resources: 1 added, 1 changed, 1 destroyed/);
    const refresh = await tc.terraform(["apply", "-refresh-only", "-auto-approve"], dir);
    assert.equal(refresh.code, 0, refresh.output);
    assert.match(refresh.output, /No changes|Apply complete! Resources: 0 added, 0 changed, 0 destroyed/);
  });

  test("drover run start and terraform take turns on the workspace: one state history, one queue", async () => {
    const before = await stateSerial(ws);
    await tc.stack.server.api(routes.setVariable, {
      params: { ws, key: "greeting" },
      body: { value: "from drover", kind: "terraform", sensitive: false },
    });
    const runId = await tc.stack.startRun(dir, ws, ["--auto-apply"]);
    await tc.stack.waitForRun(runId, ["applied"]);
    const afterDrover = await stateSerial(ws);
    assert.ok(afterDrover !== null && before !== null && afterDrover > before, `${before} → ${afterDrover}`);
    // terraform plans against the state drover's run wrote, with the workspace's variable.
    const plan = await tc.terraform(["plan", "-detailed-exitcode"], dir);
    assert.equal(plan.code, 0, plan.output);

    await tc.stack.server.api(routes.deleteVariable, { params: { ws, key: "greeting" }, query: { kind: "terraform" } });
  });

  test("-destroy destroys everything", async () => {
    const destroy = await tc.terraform(["apply", "-destroy", "-auto-approve"], dir);
    assert.equal(destroy.code, 0, destroy.output);
    assert.match(destroy.output, /Resources: 0 added, 0 changed, 2 destroyed/);
    assert.deepEqual(await outputs(ws), {});
  });
});

describe("saved cloud plans: plan -out, then apply the file", () => {
  const ws = "saved";
  let dir: string;
  before(async () => {
    dir = tc.config("saved", { name: ws }, { "main.tf": main });
    const init = await tc.terraform(["init", "-input=false"], dir);
    assert.equal(init.code, 0, init.output);
  });

  test("the saved run waits for its apply and holds the workspace; applying the file applies that run once", async () => {
    // Even on a workspace that applies its runs by itself: a saved plan waits for its file's apply.
    const auto = await tc.stack.server.api(routes.updateWorkspace, { params: { ws }, body: { autoApply: true } });
    assert.equal(auto.status, 200, JSON.stringify(auto.body));
    const plan = await tc.terraform(["plan", "-out=saved.tfplan"], dir);
    assert.equal(plan.code, 0, plan.output);
    assert.match(plan.output, /Plan: 2 to add/);
    const bookmark = JSON.parse(readFileSync(join(dir, "saved.tfplan"), "utf8")) as {
      run_id: string;
      hostname: string;
    };
    assert.equal(bookmark.hostname, tc.hostname);
    const [saved] = await runs(ws);
    assert.equal(saved?.id, bookmark.run_id, "the file names the run that planned");
    assert.equal(saved?.status, "planned", "it waits for an apply, not applied by the plan");
    assert.equal(saved?.planOnly, false);
    assert.equal(saved?.savedPlan, true);
    const show = await tc.stack.cli(["run", "show", bookmark.run_id]);
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /Saved plan: applies only by `terraform apply` of the plan file/);
    assert.equal(await stateSerial(ws), null, "a saved plan writes no state");
    const shown = await tc.terraform(["show", "-json", "saved.tfplan"], dir);
    assert.equal(shown.code, 0, shown.output);
    const planJson = JSON.parse(shown.output.slice(shown.output.indexOf("{"))) as {
      resource_changes: { address: string; change: { actions: string[] } }[];
    };
    assert.deepEqual(planJson.resource_changes.map((c) => `${c.address} ${c.change.actions.join()}`).sort(), [
      "terraform_data.a create",
      "terraform_data.b create",
    ]);
    // The human form: terraform renders the plan itself, with the providers' schemas the run's plan job kept.
    const human = await tc.terraform(["show", "-no-color", "saved.tfplan"], dir);
    assert.equal(human.code, 0, human.output);
    assert.match(human.output, /# terraform_data\.a will be created/);
    assert.match(human.output, /# terraform_data\.b will be created/);
    assert.match(human.output, /Plan: 2 to add, 0 to change, 0 to destroy/);
    assert.match(human.output, /Run status: planned \(confirmable\)/);
    // A run started meanwhile waits behind it: the plan stays the plan of the state it read. A
    // plan-only run changes no state: it goes beside.
    const cv = saved?.configurationVersionId ?? "";
    const queuedBehind = await tc.stack.server.api(routes.createRun, {
      body: { workspace: ws, configurationVersionId: cv },
    });
    assert.equal(queuedBehind.status, 201, JSON.stringify(queuedBehind.body));
    assert.equal(queuedBehind.body.status, "pending");
    assert.equal(queuedBehind.body.savedPlan, false);
    const beside = await tc.stack.server.api(routes.createRun, {
      body: { workspace: ws, configurationVersionId: cv, planOnly: true },
    });
    assert.equal(beside.body.status, "queued");
    await tc.stack.waitForRun(beside.body.id, ["planned_and_finished"]);

    const apply = await tc.terraform(["apply", "saved.tfplan"], dir);
    assert.equal(apply.code, 0, apply.output);
    assert.match(apply.output, /Apply complete! Resources: 2 added/);
    assert.doesNotMatch(apply.output, /Do you want to perform these actions/, "a saved plan applies unasked");
    const after = await runs(ws);
    assert.equal(after.find((r) => r.id === saved?.id)?.status, "applied");
    assert.equal(await stateSerial(ws), 1);
    assert.deepEqual(await outputs(ws), { greeting: "hello" });
    await tc.stack.waitForRun(queuedBehind.body.id, ["planned_and_finished"]);

    const again = await tc.terraform(["apply", "saved.tfplan"], dir);
    assert.equal(again.code, 1, again.output);
    assert.match(again.output, /Saved plan is already applied/);
    assert.equal(await stateSerial(ws), 1);
  });

  test("a discarded saved plan cannot be applied; a plan file from another workspace is refused", async () => {
    writeFileSync(join(dir, "main.tf"), main.replace('default = "hello"', 'default = "changed"'));
    const plan = await tc.terraform(["plan", "-out=discarded.tfplan"], dir);
    assert.equal(plan.code, 0, plan.output);
    const [run] = await runs(ws);
    assert.equal(run?.status, "planned");
    assert.equal((await tc.stack.server.api(routes.discardRun, { params: { id: run?.id ?? "" } })).status, 200);
    const apply = await tc.terraform(["apply", "discarded.tfplan"], dir);
    assert.equal(apply.code, 1, apply.output);
    assert.match(apply.output, /Saved plan is discarded/);
    assert.deepEqual(await outputs(ws), { greeting: "hello" }, "nothing applied");

    const other = tc.config("saved-other", { name: "saved-other" }, { "main.tf": main });
    assert.equal((await tc.terraform(["init", "-input=false"], other)).code, 0);
    const elsewhere = await tc.terraform(["plan", "-out=other.tfplan"], other);
    assert.equal(elsewhere.code, 0, elsewhere.output);
    copyFileSync(join(other, "other.tfplan"), join(dir, "other.tfplan"));
    const wrong = await tc.terraform(["apply", "other.tfplan"], dir);
    assert.equal(wrong.code, 1, wrong.output);
    assert.match(wrong.output, /Saved plan is for a different workspace/);
    assert.equal((await runs("saved-other"))[0]?.status, "planned", "the other workspace's run is untouched");
  });
});

describe("Ctrl-C", () => {
  const gated = (gate: string) => `
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "echo waiting-for-gate; while [ ! -f ${gate} ]; do sleep 0.1; done"
  }
}
`;

  test("one SIGINT during an apply cancels the run", async () => {
    const gate = join(tc.stack.dir, "gate-once");
    const dir = tc.config("interrupted", { name: "interrupted" }, { "main.tf": gated(gate) });
    assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
    tc.requests.length = 0;
    const apply = tc.spawnTerraform(["apply", "-auto-approve"], dir);
    await apply.waitFor(/waiting-for-gate/, 120_000);
    // A plan-only run goes beside the apply (which holds the state's lock), on a second agent,
    // and ends while terraform's apply still waits: speculative plans do not queue.
    const beside = await tc.stack.startAgent("beside-agent");
    const queued = await tc.stack.startRun(dir, "interrupted", ["--plan-only"]);
    try {
      assert.equal(
        (await tc.stack.waitForRun(queued, ["planned_and_finished", "errored"])).status,
        "planned_and_finished",
        await runLog(tc.stack.server, queued, "plan"),
      );
    } finally {
      await beside.stop();
    }
    assert.equal(apply.child.exitCode, null, "terraform's apply still waits at the gate");
    apply.child.kill("SIGINT");
    const result = await apply.done;
    assert.ok(
      tc.requests.some((r) => r.method === "POST" && r.url.endsWith("/actions/cancel")),
      result.output,
    );
    const [, terraformRun] = await runs("interrupted");
    assert.ok(terraformRun);
    assert.equal((await tc.stack.waitForRun(terraformRun.id, ["canceled", "errored", "applied"])).status, "canceled");
    writeFileSync(gate, "");
  });

  test("a second SIGINT exits terraform at once; the cancel the first one sent still ends the run", async () => {
    const gate = join(tc.stack.dir, "gate-twice");
    const dir = tc.config("interrupted-twice", { name: "interrupted-twice" }, { "main.tf": gated(gate) });
    assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
    tc.requests.length = 0;
    const apply = tc.spawnTerraform(["apply", "-auto-approve"], dir);
    await apply.waitFor(/waiting-for-gate/, 120_000);
    apply.child.kill("SIGINT");
    const canceled = () => tc.requests.some((r) => r.method === "POST" && r.url.endsWith("/actions/cancel"));
    for (let attempt = 0; !canceled(); attempt++) await pollWait(attempt);
    apply.child.kill("SIGINT");
    const result = await apply.done;
    // terraform 1.11.4 never calls force-cancel: the second interrupt only stops it waiting.
    assert.ok(!tc.requests.some((r) => r.url.endsWith("/actions/force-cancel")), result.output);
    const [run] = await runs("interrupted-twice");
    assert.ok(run);
    assert.equal((await tc.stack.waitForRun(run.id, ["canceled", "errored", "applied"])).status, "canceled");
    writeFileSync(gate, "");
  });
});

describe("variables through the cloud block", () => {
  test("-var wins over the workspace's variable, which wins over the configuration's *.auto.tfvars", async () => {
    const ws = "remote-precedence";
    const dir = tc.config(ws, { name: ws }, { "main.tf": main, "zz.auto.tfvars": 'greeting = "fromzauto"\n' });
    const init = await tc.terraform(["init", "-input=false"], dir);
    assert.equal(init.code, 0, init.output);
    const set = await tc.stack.server.api(routes.setVariable, {
      params: { ws, key: "greeting" },
      body: { value: "fromws" },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    const fromCli = await tc.terraform(["plan", "-var", "greeting=fromcli"], dir);
    assert.equal(fromCli.code, 0, fromCli.output);
    assert.match(fromCli.output, /\+ greeting = "fromcli"/);
    const fromWs = await tc.terraform(["plan"], dir);
    assert.equal(fromWs.code, 0, fromWs.output);
    assert.match(fromWs.output, /\+ greeting = "fromws"/);
  });
});

describe("OpenTofu with a cloud block", () => {
  // tofu has no default hostname (the cloud block names it, as here) and sends
  // `User-Agent: OpenTofu/<version>`, from which the run's engine is chosen.
  test("tofu plans and applies remotely, and the runs are tofu runs", async (t) => {
    const tofu = onPath("tofu");
    if (tofu === undefined) {
      t.skip(`no tofu binary on PATH: ${process.env.PATH ?? ""}`);
      return;
    }
    const ws = "remote-tofu";
    const dir = tc.config("remote-tofu", { name: ws }, { "main.tf": main });
    const init = await tc.terraform(["init", "-input=false"], dir, { binary: tofu });
    assert.equal(init.code, 0, init.output);
    tc.requests.length = 0;
    const plan = await tc.terraform(["plan", "-detailed-exitcode"], dir, { binary: tofu });
    assert.equal(plan.code, 2, plan.output);
    assert.match(plan.output, /Plan: 2 to add, 0 to change, 0 to destroy/);
    assert.ok(
      tc.requests.some((r) => r.method === "POST" && r.url === "/api/v2/runs" && /^OpenTofu\//.test(r.userAgent ?? "")),
      "tofu created the run, naming itself",
    );
    const [planned] = await runs(ws);
    assert.equal(planned?.status, "planned_and_finished");
    const detail = await tc.stack.server.api(routes.getRun, { params: { id: planned?.id ?? "" }, query: {} });
    assert.equal(detail.body.engine, "tofu", "the engine follows the client");
    assert.match(plan.output, /\[drover\] tofu /, "the agent ran tofu");

    const apply = await tc.terraform(["apply"], dir, { binary: tofu, input: "yes\n" });
    assert.equal(apply.code, 0, apply.output);
    assert.match(apply.output, /Apply complete! Resources: 2 added, 0 changed, 0 destroyed/);
    const [applied] = await runs(ws);
    assert.equal(applied?.status, "applied");
    const appliedDetail = await tc.stack.server.api(routes.getRun, { params: { id: applied?.id ?? "" }, query: {} });
    assert.equal(appliedDetail.body.engine, "tofu");
    assert.deepEqual(await outputs(ws), { greeting: "hello" });
    assert.notEqual(await stateSerial(ws), null, "the apply wrote state in Drover");
    const workspace = await tc.stack.server.api(routes.getWorkspace, { params: { ws } });
    assert.equal(workspace.body.engine, "tofu", "a workspace tofu created runs tofu for drover run start too");
  });
});
