import assert from "node:assert/strict";
import { newPoolToken } from "@drover/protocol";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { spawnDrover } from "../support/processes.js";
import { tempDir } from "../support/temp-dir.js";

// A misconfigured agent stops at start with one line naming the setting, and exit code 2.

const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_x" });

type Command = "run" | "controller" | "worker" | "node-worker";

async function start(command: Command, env: Record<string, string>, flags: string[] = []) {
  const base: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME };
  const proc = spawnDrover(["agent", command, ...flags], { ...base, DROVER_AGENT_HEALTH_PORT: "0", ...env });
  // Only an agent that failed to stop waits this out; a long bound keeps a loaded machine from failing a good one.
  const exit = await Promise.race([proc.exited, new Promise<null>((r) => setTimeout(() => r(null), 60_000).unref())]);
  if (!exit) await proc.stop("SIGKILL");
  return { exit, output: proc.output().trim() };
}

const caCertError =
  /DROVER_CA_CERT: cannot read \/nonexistent\/ca\.pem \(no such file\), and it is not a base64-encoded PEM bundle either \(invalid_setting\) Give the path of a readable PEM file, or the PEM bundle encoded in base64\.$/;

const cases: Array<[string, Command, Record<string, string>, RegExp]> = [
  ["no token", "run", {}, /no pool token: set DROVER_TOKEN or DROVER_TOKEN_FILE/],
  [
    "a token that is not a pool token",
    "run",
    { DROVER_TOKEN: "drv_u_abc.def" },
    /DROVER_TOKEN is not a valid pool token: not a Drover pool token/,
  ],
  [
    "a concurrency above the local driver's limit",
    "run",
    { DROVER_TOKEN: token, DROVER_AGENT_CONCURRENCY: "6" },
    /DROVER_AGENT_CONCURRENCY must be a whole number from 1 to 5, got "6"/,
  ],
  [
    "an unknown stop action",
    "run",
    { DROVER_TOKEN: token, DROVER_AGENT_WORKER_ON_STOP_ACTION: "later" },
    /DROVER_AGENT_WORKER_ON_STOP_ACTION must be one of graceful, drain, force/,
  ],
  [
    "a grace period too short for drain",
    "run",
    { DROVER_TOKEN: token, DROVER_AGENT_WORKER_ON_STOP_ACTION: "drain", DROVER_AGENT_GRACE_PERIOD_SECONDS: "60" },
    /too short for the drain stop action: it needs at least 120/,
  ],
  [
    "a negative plan reuse time",
    "run",
    { DROVER_TOKEN: token, DROVER_AGENT_PLAN_REUSE_SECONDS: "-1" },
    /DROVER_AGENT_PLAN_REUSE_SECONDS must be a whole number from 0 to 86400/,
  ],
  [
    "a controller Job TTL that is not a number",
    "controller",
    { DROVER_TOKEN: token, DROVER_AGENT_JOB_TTL_SECONDS: "1h" },
    /DROVER_AGENT_JOB_TTL_SECONDS must be a whole number from 0 to 604800, got "1h"/,
  ],
  [
    "a controller pending timeout of zero",
    "controller",
    { DROVER_TOKEN: token, DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "0" },
    /DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS must be a whole number from 1/,
  ],
  [
    "a pod worker grace period that is not a number",
    "worker",
    { DROVER_URL: "http://127.0.0.1:9", DROVER_AGENT_GRACE_PERIOD_SECONDS: "2m" },
    /DROVER_AGENT_GRACE_PERIOD_SECONDS must be a whole number from 1 to 86400, got "2m"/,
  ],
  [
    "a node worker's unknown stop action",
    "node-worker",
    { DROVER_AGENT_NODE_HOME: "/tmp", DROVER_AGENT_NODE_NAME: "n", DROVER_AGENT_WORKER_ON_STOP_ACTION: "soon" },
    /DROVER_AGENT_WORKER_ON_STOP_ACTION must be one of graceful, drain, force/,
  ],
  [
    "a relative node data home",
    "node-worker",
    { DROVER_AGENT_NODE_HOME: "data", DROVER_AGENT_NODE_NAME: "n" },
    /DROVER_AGENT_NODE_HOME must be an absolute path/,
  ],
  // DROVER_CA_CERT is one setting with one parser in every process: a path that cannot be read
  // (and is not base64 PEM either) is a config error with a hint, not a crash.
  [
    "a CA bundle path that does not exist",
    "run",
    { DROVER_TOKEN: token, DROVER_CA_CERT: "/nonexistent/ca.pem" },
    caCertError,
  ],
  [
    "a CA bundle path that does not exist",
    "controller",
    { DROVER_TOKEN: token, DROVER_CA_CERT: "/nonexistent/ca.pem" },
    caCertError,
  ],
  [
    "a CA bundle path that does not exist",
    "worker",
    { DROVER_URL: "http://127.0.0.1:9", DROVER_CA_CERT: "/nonexistent/ca.pem" },
    caCertError,
  ],
  [
    "a CA bundle path that does not exist",
    "node-worker",
    { DROVER_AGENT_NODE_HOME: "/tmp", DROVER_AGENT_NODE_NAME: "n", DROVER_CA_CERT: "/nonexistent/ca.pem" },
    caCertError,
  ],
];

// Flags beat variables beat files: the token a flag names wins over any variable.
const dir = tempDir("drover-agent-config-");
const goodTokenFile = join(dir, "good-token");
writeFileSync(goodTokenFile, token + "\n");
const badTokenFile = join(dir, "bad-token");
writeFileSync(badTokenFile, "drv_u_abc.def\n");
// A concurrency the local driver refuses ends the start right after the token was accepted.
const pastToken = { DROVER_AGENT_CONCURRENCY: "6" };
const acceptedToken = /DROVER_AGENT_CONCURRENCY must be a whole number from 1 to 5/;
const precedence: Array<[string, Record<string, string>, string[], RegExp]> = [
  [
    "--token-file beats DROVER_TOKEN",
    { ...pastToken, DROVER_TOKEN: "drv_u_abc.def" },
    ["--token-file", goodTokenFile],
    acceptedToken,
  ],
  [
    "--token-file beats DROVER_TOKEN (the file's token is the one used)",
    { ...pastToken, DROVER_TOKEN: token },
    ["--token-file", badTokenFile],
    new RegExp(`--token-file ${badTokenFile} is not a valid pool token`),
  ],
  [
    "--token beats DROVER_TOKEN_FILE",
    { ...pastToken, DROVER_TOKEN_FILE: goodTokenFile },
    ["--token", "drv_u_abc.def"],
    /--token is not a valid pool token/,
  ],
  ["--token beats --token-file", pastToken, ["--token", token, "--token-file", badTokenFile], acceptedToken],
  [
    "DROVER_TOKEN beats DROVER_TOKEN_FILE",
    { ...pastToken, DROVER_TOKEN: token, DROVER_TOKEN_FILE: join(dir, "missing") },
    [],
    acceptedToken,
  ],
  [
    "--concurrency beats DROVER_AGENT_CONCURRENCY",
    { DROVER_TOKEN: token, DROVER_AGENT_CONCURRENCY: "2" },
    ["--concurrency", "7"],
    /--concurrency must be a whole number from 1 to 5, got "7"/,
  ],
];
// Each test starts its own short-lived agent process and waits for it to exit: they share nothing, so a few run at once.
describe("agent start-up checks", { concurrency: 4 }, () => {
  for (const [what, command, env, message] of cases) {
    test(`drover agent ${command} with ${what} exits 2 with one clear line`, async () => {
      const { exit, output } = await start(command, env);
      assert.ok(exit, `the agent kept running:\n${output}`);
      assert.equal(exit.code, 2, output);
      assert.match(output, message);
      assert.equal(output.split("\n").length, 1, `one line, not a stack trace:\n${output}`);
    });
  }

  for (const [what, env, flags, message] of precedence) {
    test(`drover agent run: ${what}`, async () => {
      const { exit, output } = await start("run", env, flags);
      assert.ok(exit, `the agent kept running:\n${output}`);
      assert.equal(exit.code, 2, output);
      assert.match(output, message);
    });
  }

  test("a misspelt DROVER_* variable is named in a warning with the closest setting, and the start goes on", async () => {
    const { exit, output } = await start("run", {
      DROVER_TOKEN: token,
      DROVER_AGENT_CONCURENCY: "3",
      DROVER_AGENT_CONCURRENCY: "9",
    });
    assert.ok(exit, `the agent kept running:\n${output}`);
    const lines = output.split("\n");
    assert.deepEqual(
      lines[0],
      "drover: warning: DROVER_AGENT_CONCURENCY is not a Drover setting and is ignored; did you mean DROVER_AGENT_CONCURRENCY?",
    );
    // The real setting is still read (and refused here), so the warning did not stop the start.
    assert.match(lines[1] ?? "", /DROVER_AGENT_CONCURRENCY must be a whole number from 1 to 5, got "9"/);
    assert.equal(exit.code, 2);
  });
});
