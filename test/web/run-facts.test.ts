import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, Page } from "playwright-core";
import { accessibilityViolations, launchBrowser, watchedPage } from "../support/browser.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// What a run's page says about the run with a real agent and real terraform: when it was
// created and when it started, a long list of changes that does not bury the logs, and a
// failure's error said once.

let stack: Stack;
let browser: Browser;
let page: Page;
let problems: () => string[];

before(async () => {
  stack = await startStack();
  await stack.startAgent("facts-agent");
  browser = await launchBrowser();
  ({ page, problems } = await watchedPage(browser, stack.server.url, stack.server.adminToken, 90_000));
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

async function workspace(name: string, pool = stack.pool, autoApply = false): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool, autoApply } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

/** The About section's facts as term → text. */
async function facts(p: Page): Promise<Record<string, string>> {
  const about = p.getByRole("region", { name: "About" });
  await about.locator("dt").first().waitFor();
  const terms = await about.locator("dt").allTextContents();
  const texts = await about.locator("dd").allTextContents();
  return Object.fromEntries(terms.map((t, i) => [t, texts[i] ?? ""]));
}

test("a run says when it was created, and when it started only once a job has started", async () => {
  // A pool without agents: its run stays queued.
  const idle = await stack.createPool("idle");
  await workspace("waiting", idle.pool);
  const dir = writeConfig(stack.dir, "facts-config", { "main.tf": 'resource "terraform_data" "x" {}\n' });
  const queued = await stack.startRun(dir, "waiting");
  await page.goto(`${stack.server.url}/app/workspaces/waiting/runs/${queued}`);
  const before = await facts(page);
  assert.match(before.Created ?? "", /ago|now/, JSON.stringify(before));
  assert.equal(before.Started, undefined, `a queued run has not started: ${JSON.stringify(before)}`);

  await workspace("ran");
  const ran = await stack.startRun(dir, "ran", ["--plan-only"]);
  await stack.waitForRun(ran, ["planned_and_finished"]);
  const jobs = await stack.server.api(routes.listRunJobs, { params: { id: ran } });
  const startedAt = (jobs.body.items as { startedAt: string | null }[])
    .map((j) => j.startedAt)
    .filter((t): t is string => t !== null)
    .sort()[0];
  assert.ok(startedAt, JSON.stringify(jobs.body));
  const run = await stack.server.api(routes.getRun, { params: { id: ran } });
  await page.goto(`${stack.server.url}/app/workspaces/ran/runs/${ran}`);
  const about = page.getByRole("region", { name: "About" });
  await about.locator("dt", { hasText: /^Started$/ }).waitFor();
  const times = await about.locator("time").evaluateAll((els) => els.map((e) => e.getAttribute("datetime")));
  assert.deepEqual(times, [run.body.createdAt, startedAt], "Created, then Started at the first job's start");
  assert.deepEqual(problems(), []);
});

test("a plan of 150 changes lists the first 20 until the user asks for all, from the keyboard", async () => {
  await workspace("many");
  const dir = writeConfig(stack.dir, "many-config", {
    "main.tf": 'resource "terraform_data" "n" {\n  count = 150\n  input = count.index\n}\n',
  });
  const runId = await stack.startRun(dir, "many", ["--plan-only"]);
  await stack.waitForRun(runId, ["planned_and_finished"]);
  await page.goto(`${stack.server.url}/app/workspaces/many/runs/${runId}`);
  const plan = page.getByRole("region", { name: "Plan" });
  const rows = plan.getByRole("table", { name: "Resource changes" }).locator("tbody tr");
  const showAll = plan.getByRole("button", { name: "Show all 150 changes" });
  await showAll.waitFor();
  assert.equal(await rows.count(), 20);
  await plan.getByText("+150 to add").waitFor();

  await showAll.focus();
  await page.keyboard.press("Enter");
  await rows.nth(149).waitFor();
  assert.equal(await rows.count(), 150);
  assert.equal(await showAll.count(), 0, "nothing more to show");
  assert.deepEqual(await accessibilityViolations(page), []);
  await plan.getByText("+150 to add").waitFor();
  assert.deepEqual(problems(), []);
});

test("a failed run's error is shown once, and the timeline still says the run failed", async () => {
  await workspace("failing", stack.pool, true);
  const dir = writeConfig(stack.dir, "failing-config", {
    "main.tf": `resource "terraform_data" "a" {
  provisioner "local-exec" {
    command = "echo about to fail; exit 1"
  }
}
`,
  });
  const runId = await stack.startRun(dir, "failing");
  const run = await stack.waitForRun(runId, ["errored"]);
  const firstLine = String(run.errorMessage).split("\n")[0]?.slice(0, 60) ?? "";
  assert.ok(firstLine, JSON.stringify(run));
  await page.goto(`${stack.server.url}/app/workspaces/failing/runs/${runId}`);
  const timeline = page.getByRole("region", { name: "Timeline" });
  await timeline.getByText("failed").first().waitFor();
  await page.getByRole("region", { name: "About" }).getByText(firstLine).waitFor();
  // The apply log holds terraform's own copy of the error; the run's facts say it once.
  const about = page.getByRole("region", { name: "About" });
  const shown = (await about.getByText(firstLine).count()) + (await timeline.getByText(firstLine).count());
  assert.equal(shown, 1, `the error is shown once: ${firstLine}`);
  await timeline
    .getByText(/errored/)
    .first()
    .waitFor();
  await timeline.getByText(/the run failed/).waitFor();
  assert.deepEqual(problems(), []);
});
