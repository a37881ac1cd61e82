import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { spawnDrover } from "../support/processes.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// The first day's error messages, through the real binary, a real agent and the real terraform:
// what a failed run prints, the hint for a missing variable, an agent without an engine, the
// source a bad value came from, and an https:// URL against a plain-HTTP server.

let stack: Stack;
before(async () => {
  stack = await startStack();
  await stack.startAgent("errors-agent");
});
after(() => stack?.stop());

const escaped = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const count = (text: string, part: string) => text.split(part).length - 1;

test("a failed plan ends with its duration, then terraform's whole first sentence; the error block prints once", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "syntax", pool: stack.pool } });
  // A block terraform cannot parse: init reports it with a sentence it wraps over two lines.
  const dir = writeConfig(stack.dir, "syntax", { "main.tf": 'resource "terraform_data" "a" {\n  input = \n}\n' });
  const res = await stack.cli(["run", "start", dir, "--workspace", "syntax"], { subprocess: true });
  assert.equal(res.code, 1, res.stdout + res.stderr);
  const outcome = /\[drover\] plan failed in stage (\w+) after \d+\.\d s: (Error: [^\n]*)\n/.exec(res.stdout);
  assert.ok(outcome, res.stdout);
  const sentence = outcome[2] ?? "";
  assert.match(sentence, /\.$/, `the first sentence, whole: ${sentence}`);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "syntax", limit: 1 } })).body.items[0];
  assert.equal(run.status, "errored", run.errorMessage);
  const block = run.errorMessage as string;
  // Terraform's block is in the log once; the summary the CLI prints after it does not repeat it.
  const lastLine = block.trim().split("\n").at(-1) ?? "";
  assert.ok(lastLine.length > 10, block);
  assert.equal(count(res.stdout, lastLine), 1, res.stdout);
  assert.match(res.stdout, new RegExp(`\\nRun ${run.id}: errored\\n*$`));
});

test("a missing required variable gets the command that sets it on the workspace", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "needs-region", pool: stack.pool } });
  const dir = writeConfig(stack.dir, "needs-region", {
    "main.tf": 'variable "region" {\n  type = string\n}\noutput "r" {\n  value = var.region\n}\n',
  });
  const res = await stack.cli(["run", "start", dir, "--workspace", "needs-region"], { subprocess: true });
  assert.equal(res.code, 1, res.stdout + res.stderr);
  const hint = "[drover] set region with: drover workspace set-var needs-region region=…";
  // After terraform's own advice, in the log; once.
  assert.ok(res.stdout.indexOf("-var-file") < res.stdout.indexOf(hint), res.stdout);
  assert.equal(count(res.stdout, hint), 1, res.stdout);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "needs-region", limit: 1 } })).body
    .items[0];
  assert.ok((run.errorMessage as string).includes(hint), run.errorMessage);
});

test("an agent without terraform on PATH warns at start; the run's error names the directories and the releases", async () => {
  const { pool, token } = await stack.createPool("no-engine");
  const releases = "http://127.0.0.1:1/terraform";
  const agent = await stack.startAgent(
    "no-engine-agent",
    { DROVER_TOKEN: token, PATH: "/usr/bin:/bin", DROVER_AGENT_TERRAFORM_RELEASES_URL: releases },
    pool,
  );
  assert.match(
    agent.output(),
    /no terraform or tofu on PATH: runs of workspaces without an engineVersion will download the newest release \(terraform: from http:\/\/127\.0\.0\.1:1\/terraform\/index\.json\)/,
  );
  assert.match(agent.output(), /"searched":"\/usr\/bin, \/bin"/);
  await stack.server.api(routes.createWorkspace, { body: { name: "no-engine", pool } });
  const dir = writeConfig(stack.dir, "no-engine", { "main.tf": 'output "x" {\n  value = 1\n}\n' });
  const runId = await stack.startRun(dir, "no-engine");
  const run = await stack.waitForRun(runId, ["errored"]);
  assert.match(run.errorMessage, /^engine_unavailable: the terraform releases cannot be listed: .*127\.0\.0\.1:1/);
  assert.match(run.errorMessage, /no terraform on PATH either \(on PATH: none; searched \/usr\/bin, \/bin\)/);
  assert.doesNotMatch(run.errorMessage, /0\.0\.0/);
});

test("a bad value is blamed on its source: --url, the credentials file, --token-file", async () => {
  const env = { ...stack.baseEnv, DROVER_TOKEN: stack.server.adminToken };
  const flag = await stack.cli(["workspace", "list", "--url", "127.0.0.1:8810"], { subprocess: true, env });
  assert.equal(flag.code, 2, flag.stderr);
  assert.match(flag.stderr, /--url is not a URL: "127\.0\.0\.1:8810"/);
  assert.doesNotMatch(flag.stderr, /DROVER_URL is not/);

  const configDir = join(stack.dir, "bad-login");
  mkdirSync(configDir, { recursive: true });
  writeFileSync(join(configDir, "credentials.json"), JSON.stringify({ url: "127.0.0.1:8810", token: "drv_u_x.y" }));
  const fromFile = await stack.cli(["workspace", "list"], {
    subprocess: true,
    env: { DROVER_CONFIG_DIR: configDir, DROVER_URL: "", DROVER_TOKEN: "" },
  });
  assert.notEqual(fromFile.code, 0);
  assert.match(
    fromFile.stderr,
    new RegExp(`the url in ${escaped(join(configDir, "credentials.json"))} is not a URL: "127\\.0\\.0\\.1:8810"`),
  );

  const file = join(stack.dir, "bad.tok");
  writeFileSync(file, "not-a-pool-token\n");
  const agent = spawnDrover(["agent", "run", "--token-file", file], {
    ...stack.baseEnv,
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  const exit = await agent.exited;
  assert.equal(exit.code, 2, agent.output());
  assert.match(agent.output(), new RegExp(`--token-file ${escaped(file)} is not a valid pool token`));
  assert.doesNotMatch(agent.output(), /DROVER_TOKEN is not/);
});

test("https:// against a plain-HTTP server: the CLI and the agent say to try http://", async () => {
  const plain = stack.server.url;
  assert.match(plain, /^http:\/\//);
  const https = plain.replace(/^http:/, "https:");
  const res = await stack.cli(["pool", "list", "--url", https], { subprocess: true });
  assert.equal(res.code, 1, res.stderr);
  assert.match(
    res.stderr,
    new RegExp(
      `^drover: the server at ${escaped(https)} did not answer TLS \\(GET /api/v1/pools\\): the server may not speak HTTPS; try ${escaped(plain)} \\(server_unreachable\\) Give the http:// URL`,
    ),
  );
  assert.doesNotMatch(res.stderr, /SSL routines|openssl/);

  const agent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    DROVER_TOKEN: stack.poolToken,
    DROVER_URL: https,
    DROVER_AGENT_NAME: "https-agent",
    DROVER_AGENT_DATA_DIR: join(stack.dir, "https-agent"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
  });
  try {
    await agent.waitFor(/the server may not speak HTTPS; try http:\/\//);
    assert.doesNotMatch(agent.output(), /SSL routines/);
  } finally {
    await agent.stop("SIGKILL");
  }
});
