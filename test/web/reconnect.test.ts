import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser } from "playwright-core";
import { queueRun } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { launchBrowser, signIn, watchedContext } from "../support/browser.js";
import { freePort } from "../support/processes.js";
import { startTestServer, type TestServer } from "../support/server.js";

// An open page keeps following after the server restarts: its event stream reconnects, and what
// changed meanwhile or after shows without a reload. The session lives in the database, so it
// survives the restart too. No agent runs: the run stays queued until it is cancelled.

const dataDir = mkdtempSync(join(tmpdir(), "drover-restart-ui-"));
let browser: Browser | undefined;
let server: TestServer | undefined;
after(async () => {
  await browser?.close();
  await server?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test("a run page shows a change made after the server restarted, without a reload", async () => {
  const env = { DROVER_DATA_DIR: dataDir, DROVER_PORT: String(await freePort()) };
  server = await startTestServer(env);
  await server.api(routes.createPool, { body: { name: "p" } });
  const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);
  const { runId } = await queueRun(server, "p", "restarted", archive);

  browser = await launchBrowser();
  const { context, problems } = await watchedContext(browser);
  const page = await context.newPage();
  page.setDefaultTimeout(60_000);
  await signIn(page, server.url, server.adminToken, `/app/workspaces/restarted/runs/${runId}`);
  const status = (s: string) => page.locator(".page-title .status").filter({ hasText: new RegExp(`^${s}$`) });
  await status("queued").waitFor();

  await server.close();
  server = await startTestServer(env);
  const cancelled = await server.api(routes.cancelRun, { params: { id: runId } });
  assert.equal(cancelled.status, 200);
  await status("canceled").waitFor();
  assert.deepEqual(
    problems().filter((p) => !/ERR_CONNECTION_REFUSED|net::/.test(p)),
    [],
  );
});
