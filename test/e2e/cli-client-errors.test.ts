import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { spawnDrover } from "../support/processes.js";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * The CLI's side of the typed client: a deadline on every call (--timeout), and the coded
 * errors printed on one line with their hint. No terraform, no agent: only the server.
 */

let server: TestServer;
let silent: Server;
let silentUrl: string;
let configDir: string;

before(async () => {
  server = await startTestServer();
  configDir = mkdtempSync(join(tmpdir(), "drover-cli-errors-"));
  // Accepts connections and never answers: what a hung server or a black-holing proxy looks like.
  silent = createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const address = silent.address();
  assert.ok(address && typeof address === "object");
  silentUrl = `http://127.0.0.1:${address.port}`;
});
after(async () => {
  silent?.closeAllConnections();
  await new Promise((resolve) => silent?.close(resolve));
  await server?.stop();
  rmSync(configDir, { recursive: true, force: true });
});

async function cli(args: string[], env: Record<string, string> = {}) {
  const proc = spawnDrover(args, { PATH: process.env.PATH, HOME: configDir, DROVER_CONFIG_DIR: configDir, ...env });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

test("--timeout bounds each API call: a server that never answers gives server_unreachable on one line", async () => {
  const res = await cli(["pool", "list", "--url", silentUrl, "--token", "drv_u_x.y", "--timeout", "1"]);
  assert.equal(res.code, 1);
  assert.match(
    res.output,
    /^drover: no answer from the Drover server at http:\/\/127\.0\.0\.1:\d+ within 1000 ms \(GET \/api\/v1\/pools\) \(server_unreachable\) Check the server URL/,
  );
  assert.equal(res.output.trim().split("\n").length, 1, "one line");
});

test("DROVER_CLIENT_TIMEOUT_SECONDS sets the deadline; --timeout beats it", async () => {
  const fromEnv = await cli(["pool", "list", "--url", silentUrl, "--token", "drv_u_x.y"], {
    DROVER_CLIENT_TIMEOUT_SECONDS: "1",
  });
  assert.match(fromEnv.output, /within 1000 ms .*\(server_unreachable\)/);
  const flagWins = await cli(["pool", "list", "--url", silentUrl, "--token", "drv_u_x.y", "--timeout", "2"], {
    DROVER_CLIENT_TIMEOUT_SECONDS: "1",
  });
  assert.match(flagWins.output, /within 2000 ms .*\(server_unreachable\)/);
  // `drover login` checks the token with one call, under the same deadline.
  const login = ["login", "--url", silentUrl, "--token", "drv_u_x.y"];
  assert.match(
    (await cli(login, { DROVER_CLIENT_TIMEOUT_SECONDS: "1" })).output,
    /within 1000 ms .*\(server_unreachable\)/,
  );
  assert.match((await cli([...login, "--timeout", "2"])).output, /within 2000 ms .*\(server_unreachable\)/);
});

test("--timeout refuses a value that is not a whole number of seconds (exit 2)", async () => {
  const res = await cli(["pool", "list", "--url", server.url, "--token", server.adminToken, "--timeout", "soon"]);
  assert.equal(res.code, 2);
  assert.match(
    res.output,
    /^drover: --timeout must be a whole number from 1 to 3600, got "soon" \(invalid_setting\) See DROVER_CLIENT_TIMEOUT_SECONDS/,
  );
});

test("creating a pool twice: already_exists with its hint", async () => {
  const args = ["pool", "create", "twice", "--url", server.url, "--token", server.adminToken];
  assert.equal((await cli(args)).code, 0);
  const res = await cli(args);
  assert.equal(res.code, 1);
  assert.match(res.output, /a pool named "twice" already exists \(already_exists\) Pick another name/);
});

test("a closed port gives server_unreachable", async () => {
  const res = await cli(["workspace", "list", "--url", "http://127.0.0.1:1", "--token", "drv_u_x.y"]);
  assert.equal(res.code, 1);
  assert.match(res.output, /cannot reach the Drover server at http:\/\/127\.0\.0\.1:1 .*\(server_unreachable\)/);
});
