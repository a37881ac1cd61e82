import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { accessibilityViolations, launchBrowser, screenshotDir, watchedContext } from "../support/browser.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { numberedLinesCommand, printedLines } from "../support/provisioner-lines.js";
import { deliver, githubPullRequest, processedDelivery } from "../support/webhooks.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// A real browser (Debian's chromium) against a real server, a real agent and real terraform:
// what a user does in the web UI, page by page.

let stack: Stack;
let browser: Browser;
let context: BrowserContext;
let problems: () => string[];
let page: Page;
const shots = screenshotDir();

before(async () => {
  // The live stream re-checks its session every second: a page whose session ended elsewhere sees it soon.
  stack = await startStack({}, { liveKeepAliveMs: 1_000 });
  await stack.startAgent("ui-agent", { DROVER_AGENT_CONCURRENCY: "2" });
  browser = await launchBrowser();
  ({ context, problems } = await watchedContext(browser));
  page = await context.newPage();
  page.setDefaultTimeout(90_000);
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

async function workspace(name: string, autoApply = false): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool, autoApply } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

/** A configuration whose apply prints `step-1`, waits for `gate`, then prints `step-2`. */
function gatedApply(name: string, gate: string): string {
  return writeConfig(stack.dir, name, {
    "main.tf": `resource "terraform_data" "gated" {
  provisioner "local-exec" {
    command = "echo step-1; while [ ! -f ${gate} ]; do sleep 0.1; done; echo step-2"
  }
}
`,
  });
}

const logRows = (p: Page) => p.locator(".log-rows");
const runStatus = (p: Page, status: string) =>
  p.locator(".page-title .status").filter({ hasText: new RegExp(`^${status.replace(/_/g, " ")}$`) });

test("sign-in refuses a wrong token and accepts an API token, then shows the overview", async () => {
  await page.goto(`${stack.server.url}/`);
  assert.equal(new URL(page.url()).pathname, "/app/", "/ leads to the UI");
  await page.getByLabel("API token").fill("drv_u_wrong.0123456789abcdefghij0123456789ab");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").waitFor();
  assert.match((await page.getByRole("alert").textContent()) ?? "", /token/i);
  await page.getByLabel("API token").fill(stack.server.adminToken);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "drover_session");
  assert.ok(session, "the session cookie is set");
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, "Strict");
  assert.deepEqual(problems(), []);
});

test("a run started with the CLI streams its log into the page, is confirmed in the browser and applies", async () => {
  await workspace("live");
  const gate = join(stack.dir, "live-gate");
  const started = await stack.cli([
    "run",
    "start",
    gatedApply("live-config", gate),
    "--workspace",
    "live",
    "--no-follow",
  ]);
  assert.equal(started.code, 0, started.stderr);
  const link = /In the browser: (\S+)/.exec(started.stdout)?.[1];
  assert.ok(link, `the CLI prints the run's link:\n${started.stdout}`);
  const runId = /runs\/(run[^/\s]+)$/.exec(link)?.[1] ?? "";

  await page.goto(link);
  await runStatus(page, "planned").waitFor();
  await page.getByText("by “DROVER_ADMIN_TOKEN”", { exact: false }).waitFor();
  await logRows(page)
    .getByText(/Plan: 1 to add/)
    .waitFor();
  await page.getByRole("button", { name: "Confirm and apply" }).click();
  const dialog = page.getByRole("dialog", { name: "Apply this plan?" });
  await dialog.getByRole("button", { name: "Apply" }).click();
  await runStatus(page, "applying").waitFor();
  // The apply log arrives while terraform still runs: the page was not reloaded.
  await page.getByRole("button", { name: "Apply", pressed: true }).waitFor();
  await logRows(page)
    .getByText(/\(local-exec\): step-1$/)
    .waitFor();
  assert.equal(
    await logRows(page)
      .getByText(/\(local-exec\): step-2$/)
      .count(),
    0,
    "the apply is still waiting at the gate",
  );
  writeFileSync(gate, "");
  await logRows(page)
    .getByText(/\(local-exec\): step-2$/)
    .waitFor();
  await runStatus(page, "applied").waitFor();
  await logRows(page)
    .getByText(/Apply complete!/)
    .waitFor();
  const run = await stack.server.api(routes.getRun, { params: { id: runId } });
  assert.equal(run.body.status, "applied");
  await page.screenshot({ path: join(shots, "run.png"), fullPage: true });
  assert.deepEqual(problems(), []);
});

test("a run's page shows its targets, replacements and the agent's name", async () => {
  await workspace("narrowed");
  const dir = writeConfig(stack.dir, "narrowed-config", {
    "main.tf": 'resource "terraform_data" "a" {}\nresource "terraform_data" "b" {}\n',
  });
  const runId = await stack.startRun(dir, "narrowed", [
    "--plan-only",
    "--target",
    "terraform_data.a",
    "--replace",
    "terraform_data.b",
  ]);
  await stack.waitForRun(runId, ["planned_and_finished", "errored"]);
  await page.goto(`${stack.server.url}/app/workspaces/narrowed/runs/${runId}`);
  await page.locator("dd.addresses").filter({ hasText: "terraform_data.a" }).waitFor();
  await page.locator("dd.addresses").filter({ hasText: "terraform_data.b" }).waitFor();
  await page
    .getByText(/on agent ui-agent/)
    .first()
    .waitFor();
  // The link terraform's cloud block prints for a run: /app/<organization>/<workspace>/runs/<run>.
  await page.goto(`${stack.server.url}/app/acme/narrowed/runs/${runId}`);
  await page.locator("dd.addresses").filter({ hasText: "terraform_data.a" }).waitFor();
  // Where `terraform login` sends its user to make a token.
  await page.goto(`${stack.server.url}/app/settings/tokens?source=terraform-login`);
  await page
    .getByRole("heading", { name: /tokens/i })
    .first()
    .waitFor();
});

test("a pull request's plan shows its commit, branch, author and pull request, on its page and in the runs list", async () => {
  const token = "ghp_TOKENui0123456789abcdefSECRET";
  const root = mkdtempSync(join(tmpdir(), "drover-ui-repos-"));
  mkdirSync(join(root, "org"));
  const gitd = await startGitHttpServer(root, undefined, { basicAuth: { user: "x-access-token", password: token } });
  try {
    const sh = gitAs("Ada", "ada@example.com");
    const work = hostedRepository(sh, root, "org/site");
    const base = commitAndPush(sh, work, "main", "Start", { "main.tf": valueConfig("one") });
    const head = commitAndPush(sh, work, "feature", "Change the value", { "main.tf": valueConfig("two") });
    const connection = await stack.server.api(routes.createVcsConnection, {
      body: { name: "ui-gh", provider: "github", url: gitd.url, token },
    });
    assert.equal(connection.status, 201, JSON.stringify(connection.body));
    await workspace("from-git");
    const linked = await stack.server.api(routes.linkWorkspaceVcs, {
      params: { ws: "from-git" },
      body: { connection: "ui-gh", repository: "org/site", branch: "main", triggerPaths: [] },
    });
    assert.equal(linked.status, 200, JSON.stringify(linked.body));
    const url = "https://github.example/org/site/pull/7";
    const pr = githubPullRequest("opened", "org/site", {
      number: 7,
      base: "main",
      baseSha: base,
      head: "feature",
      headSha: head,
      url,
    });
    const sent = await deliver(stack.server.url, "ui-gh", {
      provider: "github",
      event: "pull_request",
      body: pr,
      secret: connection.body.webhookSecret as string,
    });
    assert.equal(sent.status, 202, JSON.stringify(sent.body));
    const delivery = await processedDelivery(stack.server, "ui-gh", sent);
    const runId = delivery.outcomes[0]?.runId ?? "";
    assert.ok(runId, JSON.stringify(delivery.outcomes));
    await stack.waitForRun(runId, ["planned_and_finished", "errored"]);

    await page.goto(`${stack.server.url}/app/workspaces/from-git/runs/${runId}`);
    const commit = page.locator("dd.source");
    await commit.waitFor();
    assert.equal(
      (await commit.textContent())?.replace(/\s+/g, " "),
      `${head.slice(0, 12)} of org/site on feature, by Ada <ada@example.com>`,
    );
    assert.equal(await commit.locator("code").getAttribute("title"), head, "the whole sha on hover");
    const link = page.getByRole("link", { name: "#7" });
    assert.equal(await link.getAttribute("href"), url);
    assert.match((await link.getAttribute("rel")) ?? "", /noopener/);

    await page.goto(`${stack.server.url}/app/workspaces/from-git`);
    await page
      .locator(".vcs-link")
      .filter({ hasText: "Runs start from commits to org/site on main (connection ui-gh)" })
      .waitFor();
    const row = page.locator("tr", { has: page.getByRole("link", { name: runId }) });
    await row
      .locator(".source")
      .filter({ hasText: `pull request #7 at ${head.slice(0, 7)}` })
      .waitFor();

    // A pull request whose address is no web address (a payload the VCS's secret signed all the
    // same) is shown as text: the page makes no link a click would run.
    const scripted = githubPullRequest("opened", "org/site", {
      number: 8,
      base: "main",
      baseSha: base,
      head: "feature",
      headSha: head,
      url: "javascript:window.__pwned=1",
    });
    const sent8 = await deliver(stack.server.url, "ui-gh", {
      provider: "github",
      event: "pull_request",
      body: scripted,
      secret: connection.body.webhookSecret as string,
    });
    const run8 = (await processedDelivery(stack.server, "ui-gh", sent8)).outcomes[0]?.runId ?? "";
    assert.ok(run8);
    await page.goto(`${stack.server.url}/app/workspaces/from-git/runs/${run8}`);
    await page.locator("dd.source").waitFor();
    await page.getByText("#8", { exact: true }).click();
    assert.equal(await page.getByRole("link", { name: "#8" }).count(), 0);
    assert.equal(await page.locator('a[href^="javascript:"]').count(), 0);
    assert.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined, "no script ran");
    await stack.waitForRun(run8, ["planned_and_finished", "errored"]);
    assert.deepEqual(problems(), []);
  } finally {
    await gitd.close();
    rmSync(root, { recursive: true, force: true });
  }
});

test("a run is cancelled from its page", async () => {
  await workspace("to-cancel", true);
  const gate = join(stack.dir, "never-opened");
  const runId = await stack.startRun(gatedApply("cancel-config", gate), "to-cancel");
  await page.goto(`${stack.server.url}/app/workspaces/to-cancel/runs/${runId}`);
  await runStatus(page, "applying").waitFor();
  await logRows(page)
    .getByText(/\(local-exec\): step-1$/)
    .waitFor();
  await page.getByRole("button", { name: "Cancel run" }).click();
  await page.getByRole("dialog", { name: "Cancel this run?" }).getByRole("button", { name: "Cancel run" }).click();
  await runStatus(page, "canceled").waitFor();
  assert.equal(existsSync(gate), false);
  const run = await stack.server.api(routes.getRun, { params: { id: runId } });
  assert.equal(run.body.status, "canceled");
});

test("a 200,000-line log opens and scrolls to its last line", async () => {
  await workspace("long-log", true);
  const dir = writeConfig(stack.dir, "long-log", {
    "main.tf": `resource "terraform_data" "many" {
  provisioner "local-exec" {
    command = "${numberedLinesCommand(200_000)}"
  }
}
`,
  });
  const runId = await stack.startRun(dir, "long-log");
  await stack.waitForRun(runId, ["applied"], 240_000);
  await page.goto(`${stack.server.url}/app/workspaces/long-log/runs/${runId}`);
  await logRows(page)
    .getByText(/Apply complete!/)
    .waitFor();
  const rows = await page.locator(".log-row").count();
  assert.ok(rows < 500, `only the visible rows are in the page (${rows})`);
  const log = page.getByRole("log", { name: /apply log/ });
  await log.evaluate((el) => (el.scrollTop = 0));
  await log
    .getByText(/Terraform will perform|Apply|terraform_data/)
    .first()
    .waitFor();
  await log.focus();
  await page.keyboard.press("End");
  await log.getByText(/line 200000 x+$/).waitFor();
  await log.getByText(/Apply complete!/).waitFor();

  // Search finds one line among 200,000 and brings it into view.
  await page.getByLabel("Search log").fill("line 123456");
  await page.getByLabel("Search log").press("Enter");
  await page.locator(".log-search-status").getByText("1 of 1").waitFor();
  await log
    .locator(".log-row-match")
    .getByText(/line 123456 x+$/)
    .waitFor();

  // The download is the whole log, every line of it.
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("button", { name: "Download" }).click(),
  ]);
  const saved = readFileSync((await download.path()) ?? "", "utf8");
  assert.equal(download.suggestedFilename(), `${runId}-apply.log`);
  const numbers = printedLines(saved);
  assert.equal(numbers.length, 200_000);
  assert.equal(
    numbers.findIndex((n, i) => n !== i + 1),
    -1,
  );
});

test("a variable is added and edited, a sensitive one never reaches the page", async () => {
  await workspace("vars");
  const secret = "s3cr3t-value-never-shown";
  const answers: string[] = [];
  page.on("response", (res) => {
    if (res.url().includes("/api/"))
      void res.text().then(
        (t) => answers.push(t),
        () => undefined,
      );
  });
  await page.goto(`${stack.server.url}/app/workspaces/vars/variables`);
  const add = page.getByRole("form", { name: "Add a variable" });
  await add.getByLabel("Key").fill("region");
  await add.getByLabel("Value").fill("eu-west-1");
  await add.getByRole("button", { name: "Add variable" }).click();
  await page.getByRole("cell", { name: "eu-west-1" }).waitFor();
  await page.getByRole("button", { name: "Edit terraform variable region" }).click();
  const edit = page.getByRole("form", { name: "Edit terraform variable region" });
  await edit.getByLabel("Value").fill("us-east-2");
  await edit.getByRole("button", { name: "Save" }).click();
  await page.getByRole("cell", { name: "us-east-2" }).waitFor();

  // An environment variable of the same key is another variable: deleting it leaves the terraform one.
  await add.getByLabel("Key").fill("region");
  await add.getByLabel("Value").fill("env-region");
  await add.getByLabel("Kind").selectOption("env");
  await add.getByRole("button", { name: "Add variable" }).click();
  await page.getByRole("cell", { name: "env-region" }).waitFor();
  await page
    .getByRole("row", { name: /env-region/ })
    .getByRole("button", { name: "Delete" })
    .click();
  await page.getByRole("button", { name: "Delete variable" }).click();
  await page.getByRole("cell", { name: "env-region" }).waitFor({ state: "detached" });
  const left = await stack.server.api(routes.listVariables, { params: { ws: "vars" } });
  assert.deepEqual(
    left.body.items.map((v: any) => [v.kind, v.key, v.value]),
    [["terraform", "region", "us-east-2"]],
  );

  await add.getByLabel("Key").fill("password");
  await add.getByLabel(/Sensitive/).check();
  await add.getByLabel("Value").fill(secret);
  await add.getByRole("button", { name: "Add variable" }).click();
  await page.getByRole("cell", { name: "password", exact: true }).waitFor();
  await page.reload();
  await page.getByText("sensitive — write-only").waitFor();

  const vars = await stack.server.api(routes.listVariables, { params: { ws: "vars" } });
  const byKey = Object.fromEntries(vars.body.items.map((v: any) => [v.key, v]));
  assert.equal(byKey.region.value, "us-east-2");
  assert.equal(byKey.password.sensitive, true);
  assert.equal(byKey.password.value, null);
  assert.equal((await page.content()).includes(secret), false, "not in the DOM");
  const stored = await page.evaluate(() => {
    const w = globalThis as any;
    return JSON.stringify({ ...w.localStorage }) + JSON.stringify({ ...w.sessionStorage });
  });
  assert.equal(stored.includes(secret), false, "not in the page's storage");
  await page.waitForLoadState("networkidle");
  assert.ok(answers.length > 0);
  assert.equal(
    answers.some((a) => a.includes(secret)),
    false,
    "no API answer the page read holds it",
  );
  await page.screenshot({ path: join(shots, "variables.png"), fullPage: true });
});

test("an HCL variable is added with its checkbox and shown as HCL; the destroy-all setting is saved", async () => {
  await workspace("hcl-ui");
  await page.goto(`${stack.server.url}/app/workspaces/hcl-ui/variables`);
  const add = page.getByRole("form", { name: "Add a variable" });
  await add.getByLabel("Key").fill("tags");
  await add.getByLabel("Value").fill('{a = "b"}');
  await add.getByLabel(/^HCL/).check();
  await add.getByRole("button", { name: "Add variable" }).click();
  const row = page.getByRole("row", { name: /tags/ });
  await row.getByRole("cell", { name: "HCL", exact: true }).waitFor();
  const vars = await stack.server.api(routes.listVariables, { params: { ws: "hcl-ui" } });
  assert.deepEqual(
    vars.body.items.map((v: any) => [v.key, v.hcl, v.value]),
    [["tags", true, '{a = "b"}']],
  );

  await page.goto(`${stack.server.url}/app/workspaces/hcl-ui/settings`);
  const settings = page.getByRole("form", { name: "Workspace settings" });
  const guard = settings.getByLabel(/destroys everything the workspace manages/);
  assert.equal(await guard.isChecked(), false);
  await guard.check();
  await workspace("hcl-reader");
  await settings.getByLabel(/runs may read this state \(terraform_remote_state\)/).fill("hcl-reader");
  // Changed elsewhere while the form is open: saving the form's own changes keeps it.
  const elsewhere = await stack.server.api(routes.updateWorkspace, {
    params: { ws: "hcl-ui" },
    body: { autoApply: true },
  });
  assert.equal(elsewhere.status, 200, JSON.stringify(elsewhere.body));
  await settings.getByRole("button", { name: "Save settings" }).click();
  await page.getByRole("status").getByText("Saved.").waitFor();
  const ws = await stack.server.api(routes.getWorkspace, { params: { ws: "hcl-ui" } });
  assert.equal(ws.body.autoApply, true, "the form sent no auto-apply: it did not change it");
  assert.equal(ws.body.allowDestroyAll, true);
  assert.deepEqual([ws.body.remoteStateConsumers, ws.body.globalRemoteState], [["hcl-reader"], false]);
});

test("a pool token is created (shown once) and revoked", async () => {
  await page.goto(`${stack.server.url}/app/pools/${stack.pool}`);
  await page.getByRole("heading", { name: "Agents" }).waitFor();
  await page.getByRole("cell", { name: "ui-agent" }).waitFor();
  await page.getByLabel("Description").fill("made in the browser");
  await page.getByRole("button", { name: "Create pool token" }).click();
  const shown = page.getByRole("textbox", { name: "New pool token" });
  const token = await shown.inputValue();
  assert.match(token, /^drv_p_/);
  const row = page.getByRole("row").filter({ hasText: "made in the browser" });
  await row.waitFor();
  await page.getByRole("button", { name: "Done" }).click();
  assert.equal(await shown.count(), 0, "the secret is shown once");
  await row.getByRole("button", { name: "Revoke" }).click();
  await page
    .getByRole("dialog", { name: /Revoke the pool token/ })
    .getByRole("button", { name: "Revoke token" })
    .click();
  await row.getByText("revoked").waitFor();
  const listed = await stack.server.api(routes.listPoolTokens, { params: { pool: stack.pool } });
  const made = listed.body.items.find((t: any) => t.description === "made in the browser");
  assert.ok(made?.revokedAt, "the server has it revoked");
  await page.screenshot({ path: join(shots, "pool.png"), fullPage: true });
});

test("markup and terminal escapes in run data render as text", async () => {
  await workspace("inert", true);
  const attack = "<img src=x onerror=window.__pwned=1>";
  const dir = writeConfig(stack.dir, "inert", {
    "main.tf": `resource "terraform_data" "x" {
  provisioner "local-exec" {
    command = "printf '%s\\\\n' '${attack}'; printf '\\\\033]0;title\\\\007\\\\033[2J\\\\033[31mred-text\\\\033[0m\\\\n'"
  }
}
output "html" {
  value = "${attack}"
}
`,
  });
  const res = await stack.cli([
    "run",
    "start",
    dir,
    "--workspace",
    "inert",
    "--message",
    attack,
    "--no-follow",
    "--json",
  ]);
  assert.equal(res.code, 0, res.stderr);
  const runId = JSON.parse(res.stdout).id as string;
  await stack.waitForRun(runId, ["applied"]);
  await page.goto(`${stack.server.url}/app/workspaces/inert/runs/${runId}`);
  await logRows(page).getByText("red-text", { exact: true }).waitFor();
  await logRows(page).getByText(attack).first().waitFor();
  await page.getByText(attack).first().waitFor();
  const red = logRows(page).getByText("red-text", { exact: true });
  assert.match((await red.getAttribute("class")) ?? "", /ansi-fg-1/, "the colour is rendered, not printed");
  const redRow = logRows(page).locator(".log-row", { has: page.getByText("red-text", { exact: true }) });
  assert.match(
    (await redRow.textContent()) ?? "",
    /\(local-exec\): red-text$/,
    "the OSC title and the screen erase are dropped, not shown",
  );
  await page.goto(`${stack.server.url}/app/workspaces/inert/outputs`);
  await page.getByText(attack).waitFor();
  await page.goto(`${stack.server.url}/app/workspaces`);
  await page.getByRole("link", { name: "inert" }).waitFor();
  assert.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined, "no injected script ran");
  assert.equal(await page.locator("img").count(), 0, "no injected element");
  assert.deepEqual(problems(), []);
});

test("every page passes axe-core, fits 375 px and is saved as a screenshot", async () => {
  const runs = await stack.server.api(routes.listRuns, { query: { workspace: "live" } });
  const runId = runs.body.items[0].id as string;
  const pages: [string, string][] = [
    ["home", "/app"],
    ["workspaces", "/app/workspaces"],
    ["workspace", "/app/workspaces/live"],
    ["outputs", "/app/workspaces/inert/outputs"],
    ["state", "/app/workspaces/live/state"],
    ["settings", "/app/workspaces/live/settings"],
    ["variables", "/app/workspaces/vars/variables"],
    ["run", `/app/workspaces/live/runs/${runId}`],
    ["pools", "/app/pools"],
    ["pool", `/app/pools/${stack.pool}`],
    ["tokens", "/app/tokens"],
  ];
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [name, path] of pages) {
      await page.goto(`${stack.server.url}${path}`);
      await page.locator("h1").first().waitFor();
      await page.waitForLoadState("networkidle");
      assert.deepEqual(await accessibilityViolations(page), [], `${name} (${scheme})`);
      if (scheme === "light") await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 375, height: 800 });
  for (const [name, path] of pages) {
    await page.goto(`${stack.server.url}${path}`);
    await page.locator("h1").first().waitFor();
    const width = await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number);
    assert.ok(width <= 375, `${name} needs no sideways scrolling at 375 px (${width})`);
  }
  await page.setViewportSize({ width: 1280, height: 800 });
  assert.deepEqual(problems(), []);
});

/** Presses Tab until the focused element's text or label matches `name`; fails after 40 presses. */
async function tabTo(p: Page, name: RegExp): Promise<void> {
  for (let i = 0; i < 40; i++) {
    await p.keyboard.press("Tab");
    const focused = await p.evaluate(() => {
      const doc = (globalThis as any).document;
      const el = doc.activeElement;
      if (!el || el === doc.body) return "";
      return `${el?.getAttribute("aria-label") ?? ""} ${el?.textContent ?? ""} ${el?.id ?? ""}`;
    });
    if (name.test(focused)) return;
  }
  assert.fail(`no element matching ${name} is reachable with Tab`);
}

test("the keyboard alone finds a workspace and opens and closes a confirmation", async () => {
  await page.goto(`${stack.server.url}/app/workspaces`);
  await page.getByRole("heading", { name: "Workspaces" }).waitFor();
  await tabTo(page, /ws-search/);
  await page.keyboard.type("long");
  await page.keyboard.press("Enter");
  await page.waitForURL(/\?q=long$/);
  await page.getByRole("link", { name: "long-log" }).waitFor();
  await tabTo(page, /^\s*long-log\s*$/);
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/app\/workspaces\/long-log$/);
  // The new page has the focus, as after a page load: the link that led there is gone.
  await page.locator("main:focus").waitFor();

  await workspace("keys");
  const runId = await stack.startRun(gatedApply("keys-config", join(stack.dir, "keys-gate")), "keys");
  await stack.waitForRun(runId, ["planned"]);
  await page.goto(`${stack.server.url}/app/workspaces/keys/runs/${runId}`);
  await runStatus(page, "planned").waitFor();
  await tabTo(page, /Discard/);
  await page.keyboard.press("Enter");
  const dialog = page.getByRole("dialog", { name: "Discard this plan?" });
  await dialog.waitFor();
  await page.keyboard.press("Escape");
  await dialog.waitFor({ state: "hidden" });
  await page.getByRole("button", { name: "Discard", exact: true }).and(page.locator(":focus")).waitFor();
  await page.keyboard.press("Enter");
  await tabTo(page, /Discard plan/);
  await page.keyboard.press("Enter");
  await runStatus(page, "discarded").waitFor();
});

test("signing out ends the session: the page and the API refuse the old cookie", async () => {
  await page.goto(`${stack.server.url}/app`);
  // Signed in again in another tab: the cookie now holds a new session, whose CSRF token this
  // page has not seen. Its sign-out still ends that session.
  const other = await context.newPage();
  await other.goto(`${stack.server.url}/app`);
  const again = await other.evaluate(
    async ([path, token]) =>
      (
        await (globalThis as any).fetch(path, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ token }),
        })
      ).status,
    [routes.createWebSession.path, stack.server.adminToken] as const,
  );
  assert.equal(again, 201);
  await other.close();
  const cookie = (await context.cookies()).find((c) => c.name === "drover_session");
  assert.ok(cookie);
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API token").waitFor();
  // The page's own request, from inside the browser, with whatever cookie it still holds.
  const status = await page.evaluate(
    async (path) => (await (globalThis as any).fetch(path)).status,
    routes.listWorkspaces.path,
  );
  assert.equal(status, 401);
  const replay = await stack.server.api(routes.listWorkspaces, {
    token: undefined,
    headers: { cookie: `drover_session=${cookie.value}` },
  });
  assert.equal(replay.status, 401, "the old cookie no longer works");
});

test("a page whose session is ended in another tab shows the sign-in page by itself", async () => {
  await page.goto(`${stack.server.url}/app`);
  await page.getByLabel("API token").fill(stack.server.adminToken);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  const other = await context.newPage();
  await other.goto(`${stack.server.url}/app`);
  await other.getByRole("button", { name: "Sign out" }).click();
  await other.getByLabel("API token").waitFor();
  assert.equal(await other.getByText("Your session has ended").count(), 0, "a sign-out of one's own needs no notice");
  await other.close();
  // Nothing clicked here: the live stream, refused for the ended session, signs the page out,
  // and the sign-in page says why it is back.
  await page.getByLabel("API token").waitFor();
  await page
    .getByRole("status")
    .getByText(/^Your session has ended: signed out in another tab, or its token/)
    .waitFor();
});
