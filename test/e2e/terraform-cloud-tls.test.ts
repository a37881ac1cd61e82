import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routePath, routes } from "@drover/protocol";
import { freePort, spawnDrover, type Proc } from "../support/processes.js";
import { cloudBlock, throwawayCa } from "../support/terraform-cloud.js";

/*
 * `drover server --tls-cert --tls-key` serves HTTPS itself, so terraform finds the API through
 * real service discovery (`https://<host>/.well-known/terraform.json`, no `host` block) and
 * `terraform login` works against it, trusting a throwaway CA through SSL_CERT_FILE.
 */

const adminToken = "drv_u_tls-admin.0123456789abcdefghij0123456789ab";
let dir: string;
let server: Proc;
let host: string;
let ca: ReturnType<typeof throwawayCa>;

/** A JSON call to the server over HTTPS, trusting only the throwaway CA. */
function call(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `https://${host}${path}`,
      {
        method,
        ca: readFileSync(ca.caFile),
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/**
 * Runs terraform; each answer is written once the output matches its prompt (terraform reads
 * stdin afresh per prompt, so an answer sent early is lost).
 */
function terraform(args: string[], cwd: string, env: NodeJS.ProcessEnv, answers: [RegExp, string][] = []) {
  return new Promise<{ code: number; output: string }>((resolve, reject) => {
    const child = spawn("terraform", args, { cwd, env });
    let output = "";
    const pending = [...answers];
    const onData = (d: Buffer) => {
      output += d.toString();
      const next = pending[0];
      if (next && next[0].test(output)) {
        pending.shift();
        child.stdin.write(next[1]);
        if (pending.length === 0) child.stdin.end();
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    if (answers.length === 0) child.stdin.end();
    child.on("error", reject);
    // eslint-disable-next-line no-control-regex
    child.on("close", (code) => resolve({ code: code ?? 1, output: output.replace(/\x1b\[[0-9;]*m/g, "") }));
  });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "drover-tfe-tls-"));
  ca = throwawayCa(join(dir, "ca"));
  const port = await freePort();
  host = `localhost:${port}`;
  server = spawnDrover(
    [
      "server",
      "--port",
      String(port),
      "--data-dir",
      join(dir, "data"),
      "--tls-cert",
      ca.certFile,
      "--tls-key",
      ca.keyFile,
    ],
    { ...process.env, DROVER_ADMIN_TOKEN: adminToken, DROVER_LOG_LEVEL: "warn", DROVER_TFE_ORGANIZATION: "acme" },
  );
  await server.waitFor(/listening on https:\/\//, 30_000);
  assert.equal((await call("POST", routePath(routes.createPool, {}), { name: "default" })).status, 201);
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("terraform login over HTTPS stores the token; init then finds the API by discovery and creates the workspace", async () => {
  const home = join(dir, "home");
  // terraform saves credentials only into an existing ~/.terraform.d when CHECKPOINT_DISABLE is set.
  mkdirSync(join(home, ".terraform.d"), { recursive: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    SSL_CERT_FILE: ca.caFile,
    CHECKPOINT_DISABLE: "1",
    BROWSER: "true",
  };
  // An overridden CLI config keeps terraform from reading the credentials login writes.
  delete env.TF_CLI_CONFIG_FILE;
  delete env.TF_INPUT;

  const discovery = await call("GET", "/.well-known/terraform.json");
  assert.equal(discovery.status, 200);

  const answers = (token: string): [RegExp, string][] => [
    [/Enter a value:/, "yes\n"],
    [/Token for [^\n]*\n[\s\S]*Enter a value:/, `${token}\n`],
  ];
  const login = await terraform(["login", host], dir, env, answers(adminToken));
  assert.equal(login.code, 0, login.output);
  assert.match(login.output, /Success! Logged in to/);
  assert.match(login.output, /https:\/\/localhost\/app\/settings\/tokens/, "the token page terraform points to");
  const saved = JSON.parse(readFileSync(join(home, ".terraform.d", "credentials.tfrc.json"), "utf8")) as {
    credentials: Record<string, { token: string }>;
  };
  assert.equal(saved.credentials[host]?.token, adminToken);

  mkdirSync(join(dir, "home2", ".terraform.d"), { recursive: true });
  const refused = await terraform(
    ["login", host],
    join(dir, "ca"),
    { ...env, HOME: join(dir, "home2") },
    answers("drv_u_nope.0123456789abcdefghij0123456789ab"),
  );
  assert.notEqual(refused.code, 0, "a bad token is refused by the server's account check");

  const work = join(dir, "work");
  mkdirSync(work);
  writeFileSync(join(work, "main.tf"), cloudBlock(host, "acme", { name: "over-tls" }));
  const init = await terraform(["init", "-input=false"], work, env);
  assert.equal(init.code, 0, init.output);
  const ws = await call("GET", routePath(routes.getWorkspace, { ws: "over-tls" }));
  assert.equal(ws.status, 200, "init created the workspace over HTTPS");

  const otherOrg = join(dir, "other-org");
  mkdirSync(otherOrg);
  writeFileSync(join(otherOrg, "main.tf"), cloudBlock(host, "someone-else", { name: "x" }));
  const refusedOrg = await terraform(["init", "-input=false"], otherOrg, env);
  assert.equal(refusedOrg.code, 1, refusedOrg.output);
  assert.match(refusedOrg.output, /organization "someone-else" at host localhost:\d+ not found|not found/);
});
