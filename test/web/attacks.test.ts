import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { launchBrowser, signIn, watchedContext } from "../support/browser.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// Another site's page in the same signed-in browser: what it can make the browser send to
// Drover, and what Drover does with it. No agent runs here, so a run stays queued until cancelled.

let stack: Stack;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let evil: Server;
let evilPage = "";

before(async () => {
  stack = await startStack();
  browser = await launchBrowser();
  ({ context } = await watchedContext(browser));
  page = await context.newPage();
  page.setDefaultTimeout(60_000);
  // The attacker's page: a form that posts to Drover as soon as it loads.
  evil = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(evilPage);
  });
  await new Promise<void>((resolve) => evil.listen(0, "127.0.0.1", resolve));
});
after(async () => {
  await browser?.close();
  await new Promise((resolve) => evil?.close(resolve));
  await stack?.stop();
});

const evilUrl = (host: string) => `http://${host}:${(evil.address() as AddressInfo).port}/`;

async function queuedRun(workspace: string): Promise<string> {
  await stack.server.api(routes.createWorkspace, { body: { name: workspace, pool: stack.pool } });
  const dir = writeConfig(stack.dir, workspace, { "main.tf": 'resource "terraform_data" "x" {}\n' });
  return stack.startRun(dir, workspace);
}

/** Loads the attacker's page at `host`, which posts a form to `target`; returns what the browser got back. */
async function crossSitePost(host: string, target: string): Promise<string> {
  evilPage = `<!doctype html><form method="post" action="${target}"></form>
<script>document.forms[0].submit()</script>`;
  await page.goto(evilUrl(host));
  await page.waitForURL(target);
  return (await page.textContent("body")) ?? "";
}

test("a form on another site's page cannot cancel a run with the session cookie", async () => {
  const runId = await queuedRun("csrf-target");
  await signIn(page, stack.server.url, stack.server.adminToken);
  const target = `${stack.server.url}${routes.cancelRun.path.replace(":id", runId)}`;

  // 127.0.0.1 on another port is the same site: the browser sends the cookie, the missing CSRF header stops it.
  const sameSite = await crossSitePost("127.0.0.1", target);
  assert.match(sameSite, /"error":"forbidden"/, sameSite);
  assert.match(sameSite, /csrf/i);
  // localhost is another site: SameSite=Strict keeps the cookie home.
  const otherSite = await crossSitePost("localhost", target);
  assert.match(otherSite, /"error":"unauthorized"/, otherSite);

  const run = await stack.server.api(routes.getRun, { params: { id: runId } });
  assert.notEqual(run.body.status, "canceled", "the run was not touched");
  assert.equal(run.body.cancelRequested, false);
});

test("another site's page cannot sign the browser in with a token of its choosing", async () => {
  await context.clearCookies();
  const target = `${stack.server.url}${routes.createWebSession.path}`;
  evilPage = `<!doctype html><script>
fetch(${JSON.stringify(target)}, { method: "POST", mode: "no-cors", credentials: "include",
  headers: { "content-type": "text/plain" }, body: JSON.stringify({ token: ${JSON.stringify(stack.server.adminToken)} }) })
  .finally(() => { document.title = "sent"; });
</script>`;
  await page.goto(evilUrl("127.0.0.1"));
  await page.waitForFunction(() => (globalThis as any).document.title === "sent");
  assert.deepEqual(
    (await context.cookies()).filter((c) => c.name === "drover_session"),
    [],
    "no session cookie was set",
  );
});

test("a link carrying a token does not sign the browser in until its user says so", async () => {
  await context.clearCookies();
  // The attacker's link: its own token in the fragment, so the victim would work in its account.
  await page.goto(`${stack.server.url}/app/#token=${encodeURIComponent(stack.server.adminToken)}`);
  // The note shows once the page has taken the token from the link.
  const note = page.getByRole("note");
  await note.waitFor();
  assert.match((await note.textContent()) ?? "", /only if you opened this link yourself/);
  assert.equal(new URL(page.url()).hash, "", "the token left the address bar");
  const field = page.getByLabel("API token");
  assert.equal(await field.inputValue(), stack.server.adminToken, "the link's token waits in the field");
  assert.deepEqual(
    (await context.cookies()).filter((c) => c.name === "drover_session"),
    [],
    "no session before the user signs in",
  );
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
});
