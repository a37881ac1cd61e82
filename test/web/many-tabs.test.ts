import assert from "node:assert/strict";
import { after, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, Page } from "playwright-core";
import { queueRun } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { launchBrowser, signIn, watchedContext } from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

// Many tabs of one browser on one server. Over HTTP/1.1 a browser opens at most six connections
// to a host, and a page's live stream holds one as long as it is open. No agent runs: the run
// stays queued until it is cancelled.

let browser: Browser | undefined;
let server: TestServer | undefined;
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** Makes the page hidden, or shown again, as switching to another tab does. */
async function setHidden(page: Page, hidden: boolean): Promise<void> {
  await page.evaluate((hide) => {
    // This runs in the page: its globals are the browser's.
    const doc = (globalThis as any).document;
    Object.defineProperty(doc, "hidden", { value: hide, configurable: true });
    Object.defineProperty(doc, "visibilityState", { value: hide ? "hidden" : "visible", configurable: true });
    doc.dispatchEvent(new Event("visibilitychange"));
  }, hidden);
}

test("tabs in the background free their connections: a seventh tab loads, and a tab shown again catches up", async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "p" } });
  const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);
  const { runId } = await queueRun(server, "p", "tabs", archive);
  const runPath = `/app/workspaces/tabs/runs/${runId}`;

  browser = await launchBrowser();
  const { context, problems } = await watchedContext(browser);
  const status = (page: Page, s: string) =>
    page.locator(".page-title .status").filter({ hasText: new RegExp(`^${s}$`) });
  const first = await context.newPage();
  first.setDefaultTimeout(60_000);
  await signIn(first, server.url, server.adminToken, runPath);
  const background = [first];
  for (let i = 1; i < 6; i++) {
    const page = await context.newPage();
    page.setDefaultTimeout(60_000);
    await page.goto(`${server.url}${runPath}`);
    background.push(page);
  }
  for (const page of background) {
    await status(page, "queued").waitFor();
    await setHidden(page, true);
  }

  const seventh = await context.newPage();
  seventh.setDefaultTimeout(60_000);
  await seventh.goto(`${server.url}${runPath}`);
  await status(seventh, "queued").waitFor();

  const cancelled = await server.api(routes.cancelRun, { params: { id: runId } });
  assert.equal(cancelled.status, 200);
  await status(seventh, "canceled").waitFor();
  assert.equal(await status(first, "queued").count(), 1, "a hidden tab does not follow");
  await setHidden(first, false);
  await status(first, "canceled").waitFor();

  // A tab opened in the background (hidden from its first script on) catches up when shown, too.
  const { runId: later } = await queueRun(server, "p", "tabs-later", archive);
  const opened = await context.newPage();
  opened.setDefaultTimeout(60_000);
  await opened.addInitScript(() => {
    const doc = (globalThis as any).document;
    Object.defineProperty(doc, "hidden", { value: true, configurable: true });
    Object.defineProperty(doc, "visibilityState", { value: "hidden", configurable: true });
  });
  await opened.goto(`${server.url}/app/workspaces/tabs-later/runs/${later}`);
  await status(opened, "queued").waitFor();
  assert.equal((await server.api(routes.cancelRun, { params: { id: later } })).status, 200);
  await setHidden(opened, false);
  await status(opened, "canceled").waitFor();
  assert.deepEqual(problems(), []);
});
