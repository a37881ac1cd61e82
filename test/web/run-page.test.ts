import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, Page } from "playwright-core";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { runCliInProcess } from "../support/cli.js";
import { accessibilityViolations, launchBrowser, signIn, watchedPage } from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

// What the run pages and the empty states tell a user: which workspace a run is of, why a run
// has no plan, what failed, which action is the main one, and the CLI commands to type. No agent
// runs: runs stay queued until cancelled, or until the test plays the agent's part through the
// agent API (pool "played").

let server: TestServer;
let browser: Browser;
let page: Page;
let problems: () => string[];
let session: string;
const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "p" } });
  await server.api(routes.createPool, { body: { name: "played" } });
  ({ session } = await registerAgent(server, "played", "test-agent"));
  browser = await launchBrowser();
  ({ page, problems } = await watchedPage(browser, server.url, undefined));
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

test("a missing pool says Not found and links back to the pools", async () => {
  await page.goto(`${server.url}/app/pools/no-such-pool`);
  await page.getByRole("heading", { level: 1, name: "Not found" }).waitFor();
  await page.getByText("There is no pool no-such-pool.").waitFor();
  assert.equal(await page.title(), "Not found · Drover");
  assert.deepEqual(await accessibilityViolations(page), []);
  await page.getByRole("main").getByRole("link", { name: "All pools" }).click();
  await page.getByRole("heading", { level: 1, name: "Agent pools" }).waitFor();
  assert.equal(new URL(page.url()).pathname, "/app/pools");
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

/** A run of a new workspace in pool "played" whose plan job the test ends with `outcome`, as an agent would. */
async function playedRun(workspace: string, outcome: { outcome: "succeeded" | "failed"; message?: string }) {
  const { runId } = await queueRun(server, "played", workspace, archive);
  const job = (await call(server, routes.pollJob, session, { query: { wait: 0 } })).body.job as {
    jobId: string;
    jobToken: string;
  };
  const params = { id: job.jobId };
  assert.equal((await call(server, routes.startJob, job.jobToken, { params, body: { starter: "test" } })).status, 200);
  const planSummary = { add: 1, change: 0, destroy: 2, hasChanges: true };
  const finished = await call(server, routes.finishJob, job.jobToken, { params, body: { planSummary, ...outcome } });
  assert.equal(finished.status, 204, JSON.stringify(finished.body));
  return runId;
}

test("a plan to confirm: Confirm and apply is the primary button; Discard and Cancel run are outlined", async () => {
  const runId = await playedRun("to-confirm", { outcome: "succeeded" });
  await page.goto(`${server.url}/app/workspaces/to-confirm/runs/${runId}`);
  const actions = page.getByRole("group", { name: "Run actions" });
  await actions.getByRole("button", { name: "Confirm and apply" }).waitFor();
  // Each button (the dialogs' aside): the stylesheet's button kind its background matches, and whether its text is red.
  const looks = await actions.evaluate((group) => {
    const win = globalThis as any;
    const paint = (b: unknown) => win.getComputedStyle(b) as { backgroundColor: string; color: string };
    const probe = (kind: string) => {
      const b = win.document.createElement("button");
      b.className = kind;
      group.append(b);
      const background = paint(b).backgroundColor;
      b.remove();
      return background;
    };
    const kinds: Record<string, string> = { [probe("")]: "plain", [probe("primary")]: "primary" };
    const red = probe("danger");
    kinds[red] = "filled red";
    return [...group.querySelectorAll(":scope > button")].map((b) => {
      const { backgroundColor, color } = paint(b);
      return [b.textContent, kinds[backgroundColor] ?? backgroundColor, color === red ? "red text" : "plain text"];
    });
  });
  assert.deepEqual(looks, [
    ["Confirm and apply", "primary", "plain text"],
    ["Discard", "plain", "red text"],
    ["Cancel run", "plain", "red text"],
  ]);
  assert.deepEqual(await accessibilityViolations(page), []);
  assert.deepEqual(problems(), []);
});

test("a run's error keeps terraform's lines and indentation, and fits 375 px", async () => {
  const message = [
    "terraform plan failed: Error: Unsupported argument",
    "",
    '  on main.tf line 3, in resource "terraform_data" "x":',
    '   3:   colour = "blue"',
    "",
    'An argument named "colour" is not expected here: module.a_rather_long_module_name.terraform_data.long_name',
  ].join("\n");
  const runId = await playedRun("failed-plan", { outcome: "failed", message });
  await page.setViewportSize({ width: 375, height: 800 });
  try {
    await page.goto(`${server.url}/app/workspaces/failed-plan/runs/${runId}`);
    const error = page.getByRole("region", { name: "About" }).locator("dd.error");
    // innerText is the text as laid out: a flattened paragraph reads as one line.
    assert.equal(await error.innerText(), message);
    const width = await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number);
    assert.ok(width <= 375, `the page needs no sideways scrolling at 375 px (${width})`);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
  assert.deepEqual(problems(), []);
});
