import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, Page } from "playwright-core";
import { queueRun } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { runCliInProcess } from "../support/cli.js";
import { accessibilityViolations, launchBrowser, signIn, watchedContext } from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

// What the run pages and the empty states tell a user: which workspace a run is of, why a run
// has no plan, and the CLI commands to type. No agent runs: runs stay queued until cancelled.

let server: TestServer;
let browser: Browser;
let page: Page;
let problems: () => string[];
const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "p" } });
  browser = await launchBrowser();
  const watched = await watchedContext(browser);
  problems = watched.problems;
  page = await watched.context.newPage();
  page.setDefaultTimeout(30_000);
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("a run is shown only under its own workspace; one that ended before planning says so", async () => {
  const { runId } = await queueRun(server, "p", "app", archive);
  await server.api(routes.createWorkspace, { body: { name: "hello", pool: "p" } });
  await signIn(page, server.url, server.adminToken, `/app/workspaces/hello/runs/${runId}`);
  await page.getByRole("heading", { name: "Not found" }).waitFor();
  await page.getByText(`Workspace hello has no run ${runId}.`).waitFor();
  assert.equal(await page.getByText("in workspace hello").count(), 0);

  const cancelled = await server.api(routes.cancelRun, { params: { id: runId } });
  assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
  await page.goto(`${server.url}/app/workspaces/app/runs/${runId}`);
  await page.locator(".page-title").getByText("canceled in workspace app").waitFor();
  await page.getByText("No plan: the run ended before planning.").waitFor();
  assert.equal(await page.getByText("No plan yet.").count(), 0);
  assert.deepEqual(problems(), []);
});

test("a missing workspace or run says Not found, shows no workspace tabs and links back to the workspaces", async () => {
  for (const path of ["/app/workspaces/no-such-workspace/variables", "/app/workspaces/app/runs/run-nonexistent"]) {
    await page.goto(`${server.url}${path}`);
    await page.getByRole("heading", { level: 1, name: "Not found" }).waitFor();
    assert.equal(await page.getByRole("navigation", { name: "Workspace" }).count(), 0, `${path} shows no tabs`);
    assert.deepEqual(await accessibilityViolations(page), [], path);
    await page.getByRole("main").getByRole("link", { name: "workspaces" }).click();
    await page.getByRole("heading", { level: 1, name: "Workspaces" }).waitFor();
    assert.equal(new URL(page.url()).pathname, "/app/workspaces");
  }
  assert.deepEqual(problems(), []);
});

/** `drover <words> --help` of the real CLI (in this process): its exit code and what it prints. */
async function help(words: string[]): Promise<{ code: number | null; text: string }> {
  const res = await runCliInProcess([...words, "--help"], {});
  return { code: res.code, text: res.stdout + res.stderr };
}

/** The subcommand words and the options of the `drover …` command in `text`, checked against the CLI's help. */
async function checkCommand(text: string): Promise<string> {
  const command = /drover ([^.“”]+)/.exec(text)?.[1] ?? assert.fail(`no drover command in ${JSON.stringify(text)}`);
  const tokens = command.trim().split(/\s+/);
  const words: string[] = [];
  for (const t of tokens) {
    if (!/^[a-z][a-z-]*$/.test(t)) break;
    words.push(t);
  }
  const shown = await help(words);
  assert.equal(shown.code, 0, `drover ${words.join(" ")} --help: ${shown.text}`);
  assert.match(shown.text, new RegExp(`^Usage: drover ${words.join(" ")} \\[options\\](?! \\[command\\])`, "m"));
  for (const option of tokens.filter((t) => t.startsWith("--")))
    assert.ok(shown.text.includes(option), `drover ${words.join(" ")} takes no ${option}:\n${shown.text}`);
  return shown.text;
}

test("the CLI commands the pages print exist with the options they show", async () => {
  await page.context().clearCookies();
  await page.goto(`${server.url}/app`);
  const tokenHelp = await checkCommand((await page.locator("#token-help").textContent()) ?? "");
  assert.match(tokenHelp, /Create an API token/, "the command makes the user token the field takes");

  await signIn(page, server.url, server.adminToken, "/app/workspaces/hello");
  const empty = page.getByText("No run yet");
  await checkCommand((await empty.textContent()) ?? "");
});
