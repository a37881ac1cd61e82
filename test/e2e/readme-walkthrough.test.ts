import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { droverBin, freePort, spawnProcess, type Proc } from "../support/processes.js";
import { pollWait } from "../support/poll.js";
import { routeCall } from "../support/typed-api.js";
import { routes } from "@drover/protocol";
import { markedBlocks, repoRoot } from "../support/repo.js";

// The README's "Your first real agent" section, run as a new user types it: the real `drover`
// binary on the PATH, a server, a login, a pool token written with `>`, two agents on one host, a
// workspace with a map variable, a run, and an empty directory the CLI refuses. Only the ports
// differ (free ones instead of 8800, 8080 and 8081), so the test runs beside others.

const dir = mkdtempSync(join(tmpdir(), "drover-walkthrough-"));
const processes: Proc[] = [];
after(async () => {
  await Promise.all(processes.map((p) => p.stop("SIGKILL")));
  rmSync(dir, { recursive: true, force: true });
});

/** Runs a shell script as a user would in the walkthrough's directory; its exit code and output. */
function sh(
  script: string,
  env: NodeJS.ProcessEnv,
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-eo", "pipefail", "-c", script], { cwd: dir, env, stdio: "pipe" });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input ?? "");
  });
}

test("the README's first-real-agent walkthrough works as written", { timeout: 240_000 }, async () => {
  const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
  const block = (name: string): string => {
    const found = markedBlocks(readme, `walkthrough:${name}`);
    assert.equal(found.length, 1, `one walkthrough:${name} block in the README`);
    return found[0]!;
  };
  const [serverPort, firstHealth, secondHealth] = [await freePort(), await freePort(), await freePort()];
  const localize = (text: string) =>
    text
      .replaceAll("127.0.0.1:8800", `127.0.0.1:${serverPort}`)
      .replaceAll("--health-port 8081", `--health-port ${secondHealth}`);

  // `drover` on the PATH, as the README's "Using Drover" asks; a home of the user's own.
  const bin = join(dir, "bin");
  mkdirSync(bin);
  writeFileSync(join(bin, "drover"), `#!/bin/sh\nexec "${process.execPath}" "${droverBin}" "$@"\n`);
  chmodSync(join(bin, "drover"), 0o755);
  writeFileSync(join(dir, "terraformrc"), "");
  const env: NodeJS.ProcessEnv = {
    PATH: `${bin}:${process.env.PATH}`,
    HOME: join(dir, "home"),
    TF_CLI_CONFIG_FILE: join(dir, "terraformrc"),
    CHECKPOINT_DISABLE: "1",
  };

  const serverLine = localize(block("server"));
  const server = spawnProcess("bash", ["-c", `exec ${serverLine}`], { ...env, DROVER_PORT: String(serverPort) }, dir);
  processes.push(server);
  const adminToken = (await server.waitFor(/(drv_u_\S+)/))[1]!;

  const login = await sh(localize(block("login")), env, `${adminToken}\n`);
  assert.equal(login.code, 0, login.stderr);
  const pool = await sh(block("pool"), env);
  assert.equal(pool.code, 0, pool.stderr);
  assert.match(readFileSync(join(dir, "pool-token"), "utf8"), /^drv_p_\S+\n$/);

  const agentLines = localize(block("agents")).split("\n");
  assert.equal(agentLines.length, 2, "two agents");
  for (const line of agentLines) {
    const agent = spawnProcess(
      "bash",
      ["-c", `exec ${line}`],
      { ...env, DROVER_AGENT_HEALTH_PORT: String(firstHealth) },
      dir,
    );
    processes.push(agent);
  }
  // Through the API, not a `drover` process per look: the walkthrough's own `agent list` comes next.
  for (let attempt = 0; ; attempt++) {
    const listed = await routeCall(`http://127.0.0.1:${serverPort}`, routes.listAgents, {
      token: adminToken,
      query: { pool: "prod" },
    });
    const agents: { name: string; status: string }[] = listed.status === 200 ? listed.body.items : [];
    if (["first", "second"].every((n) => agents.some((a) => a.name === n && a.status === "idle"))) break;
    assert.ok(
      attempt < 1200,
      `both agents online: ${JSON.stringify(agents)}\n${processes.map((p) => p.output()).join("\n")}`,
    );
    await pollWait(attempt);
  }

  const run = await sh(block("run"), env);
  assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /first\b[\s\S]*second\b|second\b[\s\S]*first\b/, "agent list shows both agents");
  assert.match(run.stderr + run.stdout, /Apply complete! Resources: 1 added/);
  assert.match(
    run.stdout,
    /env"?\s*[=:]\s*"prod"/,
    "the map variable reached terraform typed, and came back as an output",
  );
  assert.match(run.stdout, /team"?\s*[=:]\s*"platform"/);

  const empty = await sh(block("empty"), env);
  assert.notEqual(empty.code, 0, "an empty directory is refused");
  assert.match(empty.stderr, /\.tf/, empty.stderr);
  const runs = await sh("drover run list --workspace net --json", env);
  assert.equal(runs.code, 0, runs.stderr);
  assert.equal((JSON.parse(runs.stdout) as unknown[]).length, 1, "the empty directory started no run");
});
