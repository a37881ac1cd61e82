import assert from "node:assert/strict";
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { rawTarGz } from "../support/archives.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { testRunUid } from "../support/run-users.js";
import { routes } from "@drover/protocol";

// Issue 13 / decision 0010: attacks that need the real agent (and terraform) to show.

let stack: Stack;

before(async () => {
  // Heartbeats every second: (6) waits for the heartbeat that removes a discarded plan's directory.
  stack = await startStack({ DROVER_AGENT_HEARTBEAT_SECONDS: "1" });
  // No release server: pinned versions fall back to PATH (the default), never to the internet.
  await stack.startAgent("sec-agent", { DROVER_AGENT_TERRAFORM_RELEASES_URL: "http://127.0.0.1:1/terraform" });
});
after(() => stack?.stop());

async function workspace(name: string, extra: Record<string, unknown> = {}) {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool, ...extra } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

test("(3) a failing step that prints a sensitive value: the run's errorMessage, GET /runs and the CLI show ***", async () => {
  const secret = "s3cr3t-value-that-must-not-leak";
  await workspace("leak");
  assert.equal((await stack.cli(["workspace", "set-var", "leak", `secret=${secret}`, "--sensitive"])).code, 0);
  // terraform quotes the variable's value in this error, as a local-exec echo would.
  const dir = writeConfig(stack.dir, "leak", {
    "main.tf": 'variable "secret" { type = string }\noutput "x" { value = tonumber(var.secret) }\n',
  });
  const res = await stack.cli(["run", "start", dir, "--workspace", "leak"]);
  assert.equal(res.code, 1, res.stdout + res.stderr);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "leak" } })).body.items[0];
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage, /var\.secret is "\*\*\*"/);
  for (const shown of [
    JSON.stringify(run),
    JSON.stringify((await stack.server.api(routes.getRun, { params: { id: run.id } })).body),
    JSON.stringify((await stack.server.api(routes.listRunJobs, { params: { id: run.id } })).body),
    res.stdout + res.stderr,
    (await stack.cli(["run", "show", run.id])).stdout,
    await runLog(stack.server, run.id, "plan"),
  ]) {
    assert.ok(!shown.includes(secret), `the secret leaked into: ${shown.slice(0, 400)}`);
  }
});

test("(13) the agent never writes its variables file through a link the configuration planted", async () => {
  await workspace("planted");
  assert.equal(
    (
      await stack.server.api(routes.setVariable, {
        params: { ws: "planted", key: "secret" },
        body: { value: "planted-secret", sensitive: true },
      })
    ).status,
    200,
  );
  // A link that stays inside the archive passes the server's check; the agent must still not follow it.
  const archive = rawTarGz([
    { path: "main.tf", content: 'variable "secret" { type = string }\n' },
    { path: "decoy.json", content: "{}" },
    { path: "drover.tfvars.json", type: "symlink", linkpath: "decoy.json" },
  ]);
  const cv = await stack.server.api(routes.uploadConfiguration, { params: { ws: "planted" }, body: archive });
  assert.equal(cv.status, 201, JSON.stringify(cv.body));
  const run = await stack.server.api(routes.createRun, {
    body: { workspace: "planted", configurationVersionId: cv.body.id, planOnly: true },
  });
  const done = await stack.waitForRun(run.body.id, ["errored", "planned_and_finished", "planned"]);
  assert.equal(done.status, "errored");
  assert.match(done.errorMessage, /link named drover\.tfvars\.json/);
  const data = join(stack.dir, "agent-sec-agent", "data");
  assert.ok(!existsSync(data) || !JSON.stringify(readdirDeep(data)).includes("planted-secret"));
});

/** Every file's text below `dir`; the agent may be removing the run's directory meanwhile, so what vanishes is skipped. */
function readdirDeep(dir: string): string[] {
  const out: string[] = [];
  const gone = (err: unknown) => (err as NodeJS.ErrnoException).code === "ENOENT";
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if (gone(err)) return out;
    throw err;
  }
  for (const name of names) {
    const p = join(dir, name);
    try {
      if (lstatSync(p).isSymbolicLink()) continue;
      if (statSync(p).isDirectory()) out.push(...readdirDeep(p));
      else out.push(readFileSync(p, "utf8"));
    } catch (err) {
      if (!gone(err)) throw err;
    }
  }
  return out;
}

test("(15) a pinned engine version the agent does not have fails the run clearly, never running another", async () => {
  await workspace("pinned", { engineVersion: "0.0.1" });
  const dir = writeConfig(stack.dir, "pinned", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "pinned");
  const run = await stack.waitForRun(runId, ["errored", "planned", "planned_and_finished"]);
  assert.equal(run.status, "errored");
  assert.match(
    run.errorMessage,
    /^engine_unavailable: the terraform releases cannot be listed: .*; no terraform on PATH satisfies 0\.0\.1 either \(on PATH: \d+\.\d+\.\d+/,
  );
  const log = await runLog(stack.server, runId, "plan");
  assert.doesNotMatch(log, /\$ terraform init/, "no terraform ran");
});

test("(15) a version constraint picks a matching binary on PATH", async () => {
  await workspace("constrained", { engineVersion: ">= 1.0, < 100.0" });
  const dir = writeConfig(stack.dir, "constrained", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "constrained", ["--plan-only"]);
  const run = await stack.waitForRun(runId, ["errored", "planned_and_finished"]);
  assert.equal(run.status, "planned_and_finished", run.errorMessage);
});

test("(6) an agent removes the run directories a crashed process left, and keeps run files private", async () => {
  const { mkdirSync, writeFileSync } = await import("node:fs");
  const data = join(stack.dir, "agent-sec-fresh", "data");
  const crashed = join(data, "job-0123456789abcdef-1", "config");
  mkdirSync(crashed, { recursive: true });
  writeFileSync(join(crashed, "drover.tfvars.json"), '{"password":"left-behind"}');
  mkdirSync(join(data, "kept-plan-run-0123456789abcdef"));
  writeFileSync(join(data, "operator-notes.txt"), "not ours");
  await stack.startAgent("sec-fresh");
  assert.deepEqual(readdirSync(data).sort(), ["operator-notes.txt"], "only the agent's own leftovers were removed");
  assert.equal((statSync(data).mode & 0o777).toString(8), "700");

  // A plan that waits for confirmation keeps its directory for the apply: its files are private.
  await workspace("private");
  assert.equal(
    (
      await stack.server.api(routes.setVariable, {
        params: { ws: "private", key: "password" },
        body: { value: "kept-secret", sensitive: true },
      })
    ).status,
    200,
  );
  const dir = writeConfig(stack.dir, "private", {
    "main.tf": 'variable "password" { type = string }\nresource "terraform_data" "a" {}\n',
  });
  const runId = await stack.startRun(dir, "private");
  await stack.waitForRun(runId, ["planned"]);
  const kept = ["sec-agent", "sec-fresh"]
    .map((a) => join(stack.dir, `agent-${a}`, "data", `kept-plan-${runId}`))
    .find((d) => existsSync(d));
  assert.ok(kept, "the plan directory was kept on one of the agents");
  const vars = readdirDeepPaths(kept).find((p) => p.endsWith("drover.tfvars.json"));
  assert.ok(vars);
  for (const p of readdirDeepPaths(kept)) {
    const mode = lstatSync(p).mode;
    if (lstatSync(p).isSymbolicLink()) continue;
    assert.equal(mode & 0o077, 0, `${p} is ${(mode & 0o777).toString(8)}`);
  }
  // Discarded: the directory (variables file, plan) goes at the agent's next heartbeat, not after the reuse window.
  assert.equal((await stack.server.api(routes.discardRun, { params: { id: runId } })).body.status, "discarded");
  const deadline = Date.now() + 60_000;
  while (existsSync(kept) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  assert.ok(!existsSync(kept), "the kept plan directory was removed after the discard");
});

function readdirDeepPaths(dir: string): string[] {
  const out: string[] = [dir];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (!lstatSync(p).isSymbolicLink() && statSync(p).isDirectory()) out.push(...readdirDeepPaths(p));
    else out.push(p);
  }
  return out;
}

/** Runs the CLI with `input` written to its stdin only after its command line was read from /proc. */
async function cliWithStdin(args: string[], input: string): Promise<{ code: number; out: string; cmdline: string }> {
  const { spawn } = await import("node:child_process");
  const { droverBin } = await import("../support/processes.js");
  const child = spawn(process.execPath, [droverBin, ...args], {
    env: { ...stack.baseEnv, DROVER_TOKEN: stack.server.adminToken },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (out += d.toString()));
  // What any other user of the machine can read while the command runs.
  const cmdline = readFileSync(`/proc/${child.pid}/cmdline`, "utf8").split("\0").join(" ");
  child.stdin.end(input);
  const code = await new Promise<number>((resolve) => child.on("exit", (c) => resolve(c ?? 1)));
  return { code, out, cmdline };
}

test("(7) secrets reach the CLI through stdin or a file, never its command line", async () => {
  await workspace("stdin-secret");
  const secret = "from-stdin-not-argv-42";
  const set = await cliWithStdin(
    ["workspace", "set-var", "stdin-secret", "db_password", "--sensitive", "--value-stdin"],
    `${secret}\n`,
  );
  assert.equal(set.code, 0, set.out);
  assert.ok(!set.cmdline.includes(secret));
  const stored = await stack.server.store.db
    .selectFrom("variables")
    .select(["value", "sensitive"])
    .where("key", "=", "db_password")
    .executeTakeFirstOrThrow();
  assert.equal(stored.value, secret, "stdin's value was stored without its trailing newline");
  const listed = (await stack.server.api(routes.listVariables, { params: { ws: "stdin-secret" } })).body.items[0];
  assert.equal(listed.sensitive, true);
  assert.equal(listed.value, null);

  const { writeFileSync } = await import("node:fs");
  const file = join(stack.dir, "value.txt");
  writeFileSync(file, "from-a-file\n", { mode: 0o600 });
  assert.equal(
    (await stack.cli(["workspace", "set-var", "stdin-secret", "other", "--sensitive", "--value-file", file])).code,
    0,
  );
  const refused = await stack.cli(["workspace", "set-var", "stdin-secret", "k=v", "--value-file", file]);
  assert.notEqual(refused.code, 0);

  const login = await cliWithStdin(
    ["login", "--url", stack.server.url, "--token-stdin"],
    stack.server.adminToken + "\n",
  );
  assert.equal(login.code, 0, login.out);
  assert.ok(!login.cmdline.includes(stack.server.adminToken));
});

test("(9) the CLI creates, lists and revokes API tokens", async () => {
  const created = await stack.cli([
    "user-token",
    "create",
    "--description",
    "from the cli",
    "--expires-in-days",
    "7",
    "--json",
  ]);
  assert.equal(created.code, 0, created.stderr);
  const token = JSON.parse(created.stdout);
  const listed = await stack.cli(["user-token", "list"]);
  assert.match(listed.stdout, new RegExp(`${token.id}\\s+from the cli`));
  assert.ok(!listed.stdout.includes(token.token));
  assert.equal((await stack.cli(["pool", "list"], { env: { DROVER_TOKEN: token.token } })).code, 0);
  assert.equal((await stack.cli(["user-token", "revoke", token.id])).code, 0);
  const refused = await stack.cli(["pool", "list"], { env: { DROVER_TOKEN: token.token } });
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /revoked/);
});

test("(4) escaped, multi-line and number forms of secrets are redacted; outputs built from a secret are masked", async () => {
  await workspace("forms");
  const quoted = 'pa"ss\\word-q1';
  const pem = "-----BEGIN TEST KEY-----\nAAAAsecretline1BBBB\nCCCCsecretline2DDDD\n-----END TEST KEY-----";
  const num = "98765432";
  for (const [key, value] of [
    ["quoted", quoted],
    ["pem", pem],
    ["num", num],
  ] as const) {
    assert.equal(
      (await stack.server.api(routes.setVariable, { params: { ws: "forms", key }, body: { value, sensitive: true } }))
        .status,
      200,
    );
  }
  const dir = writeConfig(stack.dir, "forms", {
    "main.tf": [
      'variable "quoted" { type = string }',
      'variable "pem" { type = string }',
      'variable "num" { type = number }',
      'resource "terraform_data" "a" { input = { q = var.quoted, p = var.pem, n = var.num } }',
      'output "conn" { value = "host=db password=${var.quoted}" }',
      'output "plain" { value = "nothing secret" }',
      "",
    ].join("\n"),
  });
  const res = await stack.cli(["run", "start", dir, "--workspace", "forms", "--auto-apply"]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "forms" } })).body.items[0];
  const shown = [
    res.stdout,
    await runLog(stack.server, run.id, "plan"),
    await runLog(stack.server, run.id, "apply"),
    JSON.stringify((await stack.server.api(routes.runPlan, { params: { id: run.id } })).body),
  ].join("\n");
  for (const leak of ['pa\\"ss\\\\word-q1', quoted, "AAAAsecretline1BBBB", "CCCCsecretline2DDDD", num]) {
    assert.ok(!shown.includes(leak), `${leak} leaked`);
  }
  const out = await stack.cli(["output", "--workspace", "forms", "--json"]);
  const outputs = JSON.parse(out.stdout) as Array<{ name: string; sensitive: boolean; value: unknown }>;
  assert.deepEqual(
    outputs.find((o) => o.name === "conn"),
    { name: "conn", sensitive: true, type: "string", value: null },
  );
  assert.equal(outputs.find((o) => o.name === "plain")?.value, "nothing secret");
});

test("(5) with DROVER_AGENT_RUN_AS_USER a run cannot read the pool token from the agent's environment or token file", async () => {
  const { chmodSync, mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { spawnDrover } = await import("../support/processes.js");
  if (process.getuid?.() !== 0) return; // only root can start runs as another user
  await stack.server.api(routes.createPool, { body: { name: "runas" } });
  const token = (
    await stack.server.api(routes.createPoolToken, { params: { pool: "runas" }, body: { description: "runas" } })
  ).body.token as string;
  // Reachable (0711) by the run user, like /var/lib/drover.
  const home = mkdtempSync(join(tmpdir(), "drover-runas-"));
  chmodSync(home, 0o711);
  const tokenFile = join(home, "pool-token");
  writeFileSync(tokenFile, token, { mode: 0o600 });
  writeFileSync(join(home, "terraformrc"), "", { mode: 0o644 });
  const runUid = testRunUid();
  const agent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    TF_CLI_CONFIG_FILE: join(home, "terraformrc"),
    DROVER_TOKEN: token, // the worst case: the token in the agent's environment
    DROVER_AGENT_NAME: "runas-agent",
    DROVER_AGENT_DATA_DIR: join(home, "data"),
    DROVER_AGENT_CACHE_DIR: join(home, "cache"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_RUN_AS_USER: String(runUid),
  });
  try {
    await agent.waitFor(/registered/);
    await stack.server.api(routes.createWorkspace, { body: { name: "runas-ws", pool: "runas", autoApply: true } });
    const probe = (what: string, cmd: string) => `echo ${what}:$( (${cmd}) 2>&1 | base64 -w0)`;
    const command = [
      probe("ENVIRON", `cat /proc/${agent.child.pid}/environ`),
      probe("TOKENFILE", `cat ${tokenFile}`),
      probe("UID", "id -u"),
    ].join("; ");
    const dir = writeConfig(stack.dir, "runas", {
      "main.tf": `resource "terraform_data" "probe" {\n  provisioner "local-exec" {\n    command = ${JSON.stringify(command)}\n  }\n}\n`,
    });
    const runId = await stack.startRun(dir, "runas-ws");
    const run = await stack.waitForRun(runId, ["applied", "errored"]);
    const log = await runLog(stack.server, runId, "apply");
    assert.equal(run.status, "applied", `${run.errorMessage}\n${log}`);
    const decoded = (what: string) =>
      Buffer.from(new RegExp(`\\(local-exec\\): ${what}:(\\S*)`).exec(log)?.[1] ?? "", "base64").toString("utf8");
    assert.equal(decoded("UID").trim(), String(runUid), `the run ran as the run user:\n${log}`);
    for (const what of ["ENVIRON", "TOKENFILE"]) {
      assert.ok(!decoded(what).includes(token.split(".")[1] as string), `${what} gave the run the pool token`);
      assert.match(decoded(what), /Permission denied/);
    }
  } finally {
    await agent.stop("SIGKILL");
    rmSync(home, { recursive: true, force: true });
  }
});

test("(5) DROVER_AGENT_RUN_AS_USER refuses root, non-numeric values and uid ranges holding nobody or past the last uid at start (exit 2, one line)", async () => {
  const { spawnDrover } = await import("../support/processes.js");
  // A uid per job slot: slot 1 of 65533 would be nobody; Node starts processes as int32 uids only.
  const refused = [
    ["0", "1", /must not be root/],
    ["nobody", "1", /numeric uid/],
    ["65533", "2", /include 65534 \(nobody\)/],
    ["2147483647", "2", /go past 2147483647/],
  ] as const;
  for (const [value, concurrency, message] of refused) {
    const agent = spawnDrover(["agent", "run"], {
      ...stack.baseEnv,
      DROVER_TOKEN: stack.poolToken,
      DROVER_AGENT_RUN_AS_USER: value,
      DROVER_AGENT_CONCURRENCY: concurrency,
      DROVER_AGENT_HEALTH_PORT: "0",
    });
    const exit = await agent.exited;
    assert.equal(exit.code, 2, agent.output());
    assert.match(agent.output(), message);
  }
});

test("(12) the CLI escapes control characters of an error message stored before the server escaped them", async () => {
  await workspace("old-ansi");
  const dir = writeConfig(stack.dir, "old-ansi", { "main.tf": "" });
  const runId = await stack.startRun(dir, "old-ansi", ["--plan-only"]);
  await stack.waitForRun(runId, ["planned_and_finished", "errored"]);
  await stack.server.store.db
    .updateTable("runs")
    .set({ status: "errored", error_message: "boom \u001b]0;pwned\u0007\u001b[2J" })
    .where("id", "=", runId)
    .execute();
  const shown = await stack.cli(["run", "show", runId]);
  assert.ok(!shown.stdout.includes("\u001b"), JSON.stringify(shown.stdout));
  assert.match(shown.stdout, /boom \\u\{1b\}\]0;pwned/);
});
