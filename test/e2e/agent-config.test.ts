import assert from "node:assert/strict";
import { newPoolToken } from "@drover/protocol";
import { test } from "node:test";
import { spawnDrover } from "../support/processes.js";

// A misconfigured agent stops at start with one line naming the setting, and exit code 2.

const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_x" });

type Command = "run" | "controller" | "worker" | "node-worker";

async function start(command: Command, env: Record<string, string>) {
  const base: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME };
  const proc = spawnDrover(["agent", command], { ...base, DROVER_AGENT_HEALTH_PORT: "0", ...env });
  const exit = await Promise.race([proc.exited, new Promise<null>((r) => setTimeout(() => r(null), 15_000))]);
  if (!exit) await proc.stop("SIGKILL");
  return { exit, output: proc.output().trim() };
}

const cases: Array<[string, Command, Record<string, string>, RegExp]> = [
  ["no token", "run", {}, /no pool token: set DROVER_TOKEN or DROVER_TOKEN_FILE/],
  ["a token that is not a pool token", "run", { DROVER_TOKEN: "drv_u_abc.def" }, /DROVER_TOKEN is not a valid pool token: not a Drover pool token/],
  ["a concurrency above the local driver's limit", "run", { DROVER_TOKEN: token, DROVER_AGENT_CONCURRENCY: "6" }, /DROVER_AGENT_CONCURRENCY must be a whole number from 1 to 5, got "6"/],
  ["an unknown stop action", "run", { DROVER_TOKEN: token, DROVER_AGENT_WORKER_ON_STOP_ACTION: "later" }, /DROVER_AGENT_WORKER_ON_STOP_ACTION must be one of graceful, drain, force/],
  ["a grace period too short for drain", "run", { DROVER_TOKEN: token, DROVER_AGENT_WORKER_ON_STOP_ACTION: "drain", DROVER_AGENT_GRACE_PERIOD_SECONDS: "60" }, /too short for the drain stop action: it needs at least 120/],
  ["a negative plan reuse time", "run", { DROVER_TOKEN: token, DROVER_AGENT_PLAN_REUSE_SECONDS: "-1" }, /DROVER_AGENT_PLAN_REUSE_SECONDS must be a whole number from 0 to 86400/],
  ["a controller Job TTL that is not a number", "controller", { DROVER_TOKEN: token, DROVER_AGENT_JOB_TTL_SECONDS: "1h" }, /DROVER_AGENT_JOB_TTL_SECONDS must be a whole number from 0 to 604800, got "1h"/],
  ["a controller pending timeout of zero", "controller", { DROVER_TOKEN: token, DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "0" }, /DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS must be a whole number from 1/],
  ["a pod worker grace period that is not a number", "worker", { DROVER_URL: "http://127.0.0.1:9", DROVER_AGENT_GRACE_PERIOD_SECONDS: "2m" }, /DROVER_AGENT_GRACE_PERIOD_SECONDS must be a whole number from 1 to 86400, got "2m"/],
  ["a node worker's unknown stop action", "node-worker", { DROVER_AGENT_NODE_HOME: "/tmp", DROVER_AGENT_NODE_NAME: "n", DROVER_AGENT_WORKER_ON_STOP_ACTION: "soon" }, /DROVER_AGENT_WORKER_ON_STOP_ACTION must be one of graceful, drain, force/],
  ["a relative node data home", "node-worker", { DROVER_AGENT_NODE_HOME: "data", DROVER_AGENT_NODE_NAME: "n" }, /DROVER_AGENT_NODE_HOME must be an absolute path/],
];

for (const [what, command, env, message] of cases) {
  test(`drover agent ${command} with ${what} exits 2 with one clear line`, async () => {
    const { exit, output } = await start(command, env);
    assert.ok(exit, `the agent kept running:\n${output}`);
    assert.equal(exit.code, 2, output);
    assert.match(output, message);
    assert.equal(output.split("\n").length, 1, `one line, not a stack trace:\n${output}`);
  });
}
