import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { spawnDrover, type Proc } from "../support/processes.js";
import { endProcessesOfUids, processesOfUid, testRunUid } from "../support/run-users.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// Security review N2 (issue 25): with DROVER_AGENT_RUN_AS_USER, nothing a run starts outlives its
// job, and no run reads another run's environment. Needs root (runs start as other users).

const root = process.getuid?.() === 0;
let stack: Stack;
let home: string;
/** Files runs of every test's agents leave for each other (and the test): 1777, like /tmp. */
let drop: string;
const uids: number[] = [];

before(async () => {
  if (!root) return;
  stack = await startStack();
  // Reachable (0711) by the run users, like /var/lib/drover.
  home = mkdtempSync(join(tmpdir(), "drover-run-users-"));
  chmodSync(home, 0o711);
  writeFileSync(join(home, "terraformrc"), "", { mode: 0o644 });
  drop = join(home, "drop");
  mkdirSync(drop);
  chmodSync(drop, 0o1777);
});
after(async () => {
  if (!root) return;
  // What the old code let live (a failing run of these tests) must not outlive them either.
  endProcessesOfUids(uids);
  await stack?.stop();
  rmSync(home, { recursive: true, force: true });
});

/** A local agent of its own pool, running as root, its runs as `uid` + slot (gid likewise). */
async function runAsAgent(name: string, uid: number, concurrency: number): Promise<RunAsAgent> {
  for (let i = 0; i < concurrency; i++) uids.push(uid + i);
  await stack.server.api(routes.createPool, { body: { name } });
  const created = await stack.server.api(routes.createPoolToken, {
    params: { pool: name },
    body: { description: name },
  });
  return startAgent(name, created.body.token as string, uid, concurrency);
}

type RunAsAgent = Proc & { token: string };

/** Starts (or restarts: same data dir) the agent `name` of pool `name`. */
async function startAgent(name: string, token: string, uid: number, concurrency: number): Promise<RunAsAgent> {
  const agent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    TF_CLI_CONFIG_FILE: join(home, "terraformrc"),
    DROVER_TOKEN: token,
    DROVER_AGENT_NAME: name,
    DROVER_AGENT_DATA_DIR: join(home, name, "data"),
    DROVER_AGENT_CACHE_DIR: join(home, name, "cache"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_CONCURRENCY: String(concurrency),
    DROVER_AGENT_RUN_AS_USER: String(uid),
  });
  await agent.waitFor(/registered/);
  return { ...agent, token };
}

/** A configuration whose apply runs `command` (a shell line) as a local-exec provisioner. */
function execConfig(name: string, command: string): string {
  return writeConfig(stack.dir, name, {
    "main.tf": [
      'resource "terraform_data" "step" {',
      '  provisioner "local-exec" {',
      `    command = ${JSON.stringify(command)}`,
      "  }",
      "}",
      "",
    ].join("\n"),
  });
}

async function workspace(name: string, pool: string): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool, autoApply: true } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

async function applied(runId: string): Promise<string> {
  const run = await stack.waitForRun(runId, ["applied", "errored", "failed"], 180_000);
  const log = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${log}`);
  return log;
}

/** Whether `pid` is a live process of `uid` (a zombie is not: it runs nothing and holds nothing). */
function liveOf(pid: number, uid: number): boolean {
  return processesOfUid(uid).includes(pid);
}

const needsRoot = { skip: !root && "needs root" };

/** A directory every run user may write, for the runs of one test to meet in. */
function meetingDir(name: string): string {
  const dir = join(drop, name);
  mkdirSync(dir);
  chmodSync(dir, 0o1777);
  return dir;
}

/** Sets a sensitive env variable of a workspace. */
async function sensitiveEnv(ws: string, key: string, value: string): Promise<void> {
  const body = { value, sensitive: true, kind: "env" } as const;
  const res = await stack.server.api(routes.setVariable, { params: { ws, key }, body });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

test("N2: leftovers of a run (env -i setsid, double fork, nohup) are gone when its job ends", needsRoot, async () => {
  const uid = testRunUid();
  const agent = await runAsAgent("n2-leftovers", uid, 1);
  try {
    await workspace("n2-leftovers", "n2-leftovers");
    const command = [
      // No tag in its environment, a session of its own: what the env-tag sweep could not find.
      "env -i /usr/bin/setsid /bin/sh -c 'exec sleep 3001' >/dev/null 2>&1 & echo LEFT1=$!",
      "( sleep 3002 >/dev/null 2>&1 & echo LEFT2=$! )",
      "nohup sleep 3003 >/dev/null 2>&1 & echo LEFT3=$!",
    ].join("; ");
    const runId = await stack.startRun(execConfig("n2-leftovers", command), "n2-leftovers");
    const log = await applied(runId);
    // The run is applied only after the job ended: its end killed what it left, before reporting.
    for (const left of ["LEFT1", "LEFT2", "LEFT3"]) {
      const pid = Number(new RegExp(`${left}=(\\d+)`).exec(log)?.[1]);
      assert.ok(pid > 0, `${left} not in the log:\n${log}`);
      assert.ok(!liveOf(pid, uid), `${left} (pid ${pid}) outlived its job`);
    }
    assert.deepEqual(processesOfUid(uid), [], "no process of the run user is left");
  } finally {
    await agent.stop("SIGKILL");
  }
});

test("N2: a leftover of run A cannot read the environment of a later run B's terraform", needsRoot, async () => {
  const uid = testRunUid();
  const agent = await runAsAgent("n2-sequential", uid, 1);
  const dir = meetingDir("sequential");
  const secret = `victim-secret-${uid}`;
  try {
    await workspace("n2-attacker", "n2-sequential");
    await workspace("n2-victim", "n2-sequential");
    await sensitiveEnv("n2-victim", "VICTIM_SECRET", secret);
    // The reader copies the first environment holding VICTIM_SECRET it can read (no single quotes: see below).
    const reader =
      `echo $$ > ${dir}/reader.pid; while :; do for f in /proc/[0-9]*/environ; do ` +
      `if grep -q VICTIM_SECRET= "$f" 2>/dev/null; then tr "\\0" "\\n" < "$f" > ${dir}/stolen.tmp && ` +
      `mv ${dir}/stolen.tmp ${dir}/stolen && exit 0; fi; done; sleep 0.05; done`;
    // Single-quoted: the reader's own shell expands its $$ and $f.
    const attack =
      `env -i /usr/bin/setsid /bin/sh -c '${reader}' >/dev/null 2>&1 & ` +
      `while [ ! -s ${dir}/reader.pid ]; do sleep 0.05; done; echo READER=$(cat ${dir}/reader.pid)`;
    const attackLog = await applied(await stack.startRun(execConfig("n2-attacker", attack), "n2-attacker"));
    assert.match(attackLog, /READER=\d+/);
    // The victim's step goes on once the reader stole its environment or is no longer alive.
    const victim =
      `pid=$(cat ${dir}/reader.pid); ` +
      `while [ ! -e ${dir}/stolen ] && grep -qv '^[0-9]* (.*) Z' /proc/$pid/stat 2>/dev/null; ` +
      "do sleep 0.05; done; " +
      `[ -e ${dir}/stolen ] && echo VICTIM:stolen || echo VICTIM:safe`;
    const victimLog = await applied(await stack.startRun(execConfig("n2-victim", victim), "n2-victim"));
    const stolen = existsSync(join(dir, "stolen")) ? readFileSync(join(dir, "stolen"), "utf8") : "";
    const leaked = stolen.includes(secret) || stolen.includes("TF_HTTP_PASSWORD");
    assert.ok(!leaked, `run A's reader read run B's environment:\n${stolen}`);
    assert.match(victimLog, /VICTIM:safe/);
  } finally {
    await agent.stop("SIGKILL");
  }
});

test("N2: runs side by side are distinct users; neither reads the other's environment", needsRoot, async () => {
  const uid = testRunUid();
  const agent = await runAsAgent("n2-parallel", uid, 2);
  const dir = meetingDir("parallel");
  const secret = `parallel-secret-${uid}`;
  try {
    await workspace("n2-left", "n2-parallel");
    await workspace("n2-right", "n2-parallel");
    await sensitiveEnv("n2-right", "RIGHT_SECRET", secret);
    const probe = (what: string, cmd: string) => `echo ${what}:$( (${cmd}) 2>&1 | base64 -w0)`;
    // Right publishes its shell's pid (its environment is the run's) and waits for left to have tried.
    const right =
      `echo $$ > ${dir}/right.tmp && mv ${dir}/right.tmp ${dir}/right.pid; ${probe("UID", "id -u")}; ` +
      `while [ ! -e ${dir}/left.done ]; do sleep 0.05; done`;
    const left =
      `while [ ! -s ${dir}/right.pid ]; do sleep 0.05; done; ` +
      `${probe("READ", `cat /proc/$(cat ${dir}/right.pid)/environ`)}; ${probe("UID", "id -u")}; touch ${dir}/left.done`;
    const rightRun = await stack.startRun(execConfig("n2-right", right), "n2-right");
    const leftRun = await stack.startRun(execConfig("n2-left", left), "n2-left");
    const [leftLog, rightLog] = await Promise.all([applied(leftRun), applied(rightRun)]);
    const decoded = (log: string, what: string) => {
      const encoded = new RegExp(`\\(local-exec\\): ${what}:(\\S*)`).exec(log)?.[1] ?? "";
      return Buffer.from(encoded, "base64").toString("utf8");
    };
    assert.ok(!decoded(leftLog, "READ").includes(secret), "the left run read the right run's sensitive variable");
    assert.match(decoded(leftLog, "READ"), /Permission denied/);
    const uidsSeen = [decoded(leftLog, "UID").trim(), decoded(rightLog, "UID").trim()].sort();
    assert.deepEqual(uidsSeen, [String(uid), String(uid + 1)], `${leftLog}\n${rightLog}`);
  } finally {
    await agent.stop("SIGKILL");
  }
});

test("N2: a run's env -i setsid leftover is ended when its killed agent starts again", needsRoot, async () => {
  const uid = testRunUid();
  let agent = await runAsAgent("n2-restart", uid, 1);
  const dir = meetingDir("restart");
  try {
    await workspace("n2-restart", "n2-restart");
    // The step blocks, so that the agent dies while the run is under way.
    const command =
      "env -i /usr/bin/setsid /bin/sh -c 'exec sleep 3004' >/dev/null 2>&1 & " +
      `echo $! > ${dir}/left.tmp && mv ${dir}/left.tmp ${dir}/left.pid; exec sleep 3005`;
    await stack.startRun(execConfig("n2-restart", command), "n2-restart");
    const leftFile = join(dir, "left.pid");
    const deadline = Date.now() + 120_000;
    while (!existsSync(leftFile)) {
      assert.ok(Date.now() < deadline, `the run never started its leftover:\n${agent.output()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const left = Number(readFileSync(leftFile, "utf8"));
    assert.ok(liveOf(left, uid));
    await agent.stop("SIGKILL");
    assert.ok(liveOf(left, uid), "the leftover outlived its agent (what the restart must clean up)");
    // Orphans are ended before the agent registers.
    agent = await startAgent("n2-restart", agent.token, uid, 1);
    assert.ok(!liveOf(left, uid), `the restarted agent left the run's leftover alive:\n${agent.output()}`);
    assert.match(agent.output(), /ended processes left behind by jobs of this agent's previous run/);
  } finally {
    await agent.stop("SIGKILL");
  }
});
