import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, Page } from "playwright-core";
import { launchBrowser, signIn, watchedContext } from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

// The page when the server cannot be reached: a proxy in front of it answering 502, or no
// connection at all (the browser's fetch then says only "Failed to fetch"). Both are made with
// the browser's request routing, in front of a real server that is up.

let server: TestServer;
let browser: Browser;

before(async () => {
  server = await startTestServer();
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const sessionCheck = "**/api/v1/web/session";

/** A page of a browser context of its own, signed in. */
async function signedInPage(): Promise<{ page: Page; problems: () => string[] }> {
  const { context, problems } = await watchedContext(browser);
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  await signIn(page, server.url, server.adminToken);
  return { page, problems };
}

test("a page loaded while the server cannot be reached says so, retries with a growing wait, and loads once it answers", async () => {
  const { page, problems } = await signedInPage();
  let checks = 0;
  let answer: "502" | "refused" | "through" = "502";
  await page.route(sessionCheck, async (route) => {
    checks++;
    if (answer === "502") await route.fulfill({ status: 502, contentType: "text/html", body: "<h1>Bad Gateway</h1>" });
    else if (answer === "refused") await route.abort("connectionrefused");
    else await route.fallback();
  });
  await page.goto(`${server.url}/app/workspaces`);
  await page.getByRole("heading", { name: "Cannot reach the Drover server" }).waitFor();
  await page.getByRole("status").getByText("Retrying in 1 s… (last try: 502 Bad Gateway)").waitFor();
  answer = "refused";
  await page.getByRole("status").getByText("Retrying in 2 s… (last try: no connection)").waitFor();
  assert.equal(await page.getByText("Failed to fetch").count(), 0, "not the browser's own words");
  await page.getByRole("status").getByText("Retrying in 4 s…").waitFor();
  assert.equal(checks, 3, "retried by itself, each wait twice the last");

  answer = "through";
  await page.getByRole("button", { name: "Retry now" }).click();
  await page.getByRole("heading", { name: "Workspaces" }).waitFor();
  assert.equal(checks, 4);
  assert.deepEqual(problems(), []);
  await page.context().close();
});

test("an action or a page that gets no answer says the server cannot be reached, not 'Failed to fetch'", async () => {
  const { page, problems } = await signedInPage();
  const made = await server.api(routes.createUserToken, { body: { description: "to revoke" } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  await page.goto(`${server.url}/app/tokens`);
  const row = page.getByRole("row").filter({ hasText: "to revoke" });
  await page.route(`**/api/v1/user-tokens/${made.body.id}`, (route) => route.abort("connectionrefused"));
  await row.getByRole("button", { name: "Revoke" }).click();
  const dialog = page.getByRole("dialog", { name: /Revoke the API token/ });
  await dialog.getByRole("button", { name: "Revoke token" }).click();
  await dialog.getByRole("alert").getByText("Cannot reach the Drover server (no connection)").waitFor();

  await page.route("**/api/v1/workspaces?*", (route) =>
    route.fulfill({ status: 504, contentType: "text/html", body: "<h1>Gateway Timeout</h1>" }),
  );
  await page.goto(`${server.url}/app/workspaces`);
  await page.getByRole("alert").getByText("Cannot reach the Drover server (504 Gateway Timeout)").waitFor();
  assert.deepEqual(problems(), []);
  await page.context().close();
});
