import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { Run, RunStatus } from "@drover/protocol";
import { spawnDrover } from "../support/processes.js";

/*
 * `drover run cancel` reports what the server answered. A run may reach any end before the
 * cancel takes hold (an apply finishing as the request lands): such a run is over, and the CLI
 * must say how it ended, not that an agent is still stopping it. A stub server gives the answers
 * a real one gives only in that race.
 */

let stub: Server;
let stubUrl: string;
let configDir: string;
/** The run the stub answers the next cancel with. */
let answer: Run;

const run = (status: RunStatus): Run => ({
  id: "run_cancelrace",
  workspaceId: "ws_x",
  workspaceName: "x",
  configurationVersionId: "cv_x",
  status,
  planOnly: false,
  savedPlan: false,
  isDestroy: false,
  autoApply: true,
  message: "",
  errorMessage: null,
  cancelRequested: true,
  planSummary: null,
  planJobId: "job_p",
  applyJobId: "job_a",
  createdBy: null,
  targets: [],
  replaces: [],
  refreshOnly: false,
  refresh: true,
  source: null,
  createdAt: new Date(0).toISOString(),
  updatedAt: new Date(0).toISOString(),
});

before(async () => {
  configDir = mkdtempSync(join(tmpdir(), "drover-cli-cancel-"));
  stub = createServer((req, res) => {
    assert.match(req.url ?? "", /\/runs\/run_cancelrace\/cancel/);
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => stub.listen(0, "127.0.0.1", resolve));
  const address = stub.address();
  assert.ok(address && typeof address === "object");
  stubUrl = `http://127.0.0.1:${address.port}`;
});
after(async () => {
  stub?.closeAllConnections();
  await new Promise((resolve) => stub?.close(resolve));
  rmSync(configDir, { recursive: true, force: true });
});

async function cancel(): Promise<string> {
  const proc = spawnDrover(["run", "cancel", "run_cancelrace", "--url", stubUrl, "--token", "drv_u_x.y"], {
    PATH: process.env.PATH,
    HOME: configDir,
    DROVER_CONFIG_DIR: configDir,
  });
  const { code } = await proc.exited;
  assert.equal(code, 0, proc.output());
  return proc.output();
}

test("run cancel: a run that ended in any terminal status is reported as ended, not as being stopped", async () => {
  for (const status of ["applied", "errored", "planned_and_finished", "discarded", "canceled"] as const) {
    answer = run(status);
    const out = await cancel();
    assert.equal(out.trim(), `Run run_cancelrace: ${status}`, status);
  }
});

test("run cancel: a run still applying is reported as asked to stop", async () => {
  answer = run("applying");
  assert.match(await cancel(), /^Cancel requested for run run_cancelrace; the agent is stopping it/);
});
