import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startTestServer, type TestServer } from "../support/server.js";
import { markedBlocks, repoRoot } from "../support/repo.js";

// The curl examples of docs/api.md are what a user copies first: each must work as written
// against a real server, in the order the document gives them.

let server: TestServer;
let dir: string;
before(async () => {
  server = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "drover-api-examples-"));
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("every curl example of docs/api.md succeeds against a real server, in order", async () => {
  const blocks = markedBlocks(readFileSync(join(repoRoot, "docs", "api.md"), "utf8"), "api-example");
  assert.ok(blocks.length >= 10, `one example per group, found ${blocks.length}`);
  const script = blocks.map((b, i) => `echo "--- example ${i + 1}" >&2\n${b}`).join("\n");
  const env = { PATH: process.env.PATH, HOME: dir, DROVER_URL: server.url, DROVER_TOKEN: server.adminToken };
  // Asynchronously: the server answers from this very process.
  const ran = await promisify(execFile)("bash", ["-euo", "pipefail", "-c", script], { cwd: dir, env }).catch(
    (err: { code?: number; stdout?: string; stderr?: string }) => {
      assert.fail(`an example failed (exit ${err.code}):\n${err.stderr}\n${err.stdout}`);
    },
  );
  assert.match(ran.stdout, /"token":"drv_p_/, "the pool token example shows the token");
  assert.match(ran.stdout, /"token":"drv_u_/, "the API token example shows the token");

  // What the examples did is what they say they did.
  const vars = (await server.api(routes.listVariables, { params: { ws: "net" } })).body.items;
  assert.deepEqual(
    vars.map((v: { key: string; kind: string; sensitive: boolean; value: string | null }) => [
      v.key,
      v.kind,
      v.sensitive,
      v.value,
    ]),
    [
      ["DB_PASSWORD", "env", true, null],
      ["region", "terraform", false, "eu-west-1"],
    ],
  );
  const runs = (await server.api(routes.listRuns, { query: { workspace: "net" } })).body.items;
  assert.equal(runs.length, 1);
  assert.equal(runs[0].status, "canceled");

  const outputs = (await server.api(routes.workspaceOutputs, { params: { ws: "net" } })).body;
  assert.deepEqual(
    outputs.items.map((o: { name: string; value: unknown }) => [o.name, o.value]),
    [["region", "eu-west-1"]],
    "the state written through the backend gives the workspace its outputs",
  );
  const ws = (await server.api(routes.getWorkspace, { params: { ws: "net" } })).body;
  assert.equal(ws.stateLocked, false, "the lock was released");
  assert.equal(ws.autoApply, true, "the change made with the session cookie and its CSRF header");
  assert.match(ran.stdout, /"registered":false/, "offline, the link answers what to register by hand");
  assert.equal((await server.api(routes.getWorkspaceVcs, { params: { ws: "net" } })).status, 404, "unlinked");
  assert.equal((await server.api(routes.listVcsConnections, {})).body.items[0].name, "gh");
});
