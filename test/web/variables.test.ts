import assert from "node:assert/strict";
import { test } from "node:test";
import { routes } from "@drover/protocol";
import type { Page } from "playwright-core";
import { useSignedInPage } from "../support/browser.js";
import type { TestServer } from "../support/server.js";

// The variables tab's forms, where a slip replaces a value nobody can read back: a sensitive
// value is write-only, and the API's PUT sets a variable whether or not it exists.

let server: TestServer;
let page: Page;
let problems: () => string[];
useSignedInPage((ui) => ({ server, page, problems } = ui));

async function workspaceWith(name: string, vars: Record<string, { value: string; sensitive?: boolean }>) {
  const ws = await server.api(routes.createWorkspace, { body: { name, pool: "p" } });
  assert.equal(ws.status, 201, JSON.stringify(ws.body));
  for (const [key, v] of Object.entries(vars)) {
    const set = await server.api(routes.setVariable, {
      params: { ws: name, key },
      body: { value: v.value, kind: "terraform", sensitive: v.sensitive ?? false, hcl: false },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
  }
}

async function variables(ws: string): Promise<Record<string, { value: string | null; sensitive: boolean }>> {
  const res = await server.api(routes.listVariables, { params: { ws } });
  return Object.fromEntries(res.body.items.map((v: any) => [`${v.kind}:${v.key}`, v]));
}

/** Whether the browser refuses to submit `field`'s form because the field is empty and required. */
const missing = (field: ReturnType<Page["getByLabel"]>) =>
  field.evaluate((el) => (el as unknown as { validity: { valueMissing: boolean } }).validity.valueMissing);

test("a sensitive variable turned non-sensitive needs its value again; an empty field never replaces the secret", async () => {
  await workspaceWith("secrets", { password: { value: "old-secret", sensitive: true } });
  await page.goto(`${server.url}/app/workspaces/secrets/variables`);
  await page.getByRole("button", { name: "Edit terraform variable password" }).click();
  const edit = page.getByRole("form", { name: "Edit terraform variable password" });

  // Kept sensitive, the field must be filled (the API has no "keep the old value").
  assert.equal(await missing(edit.getByLabel("Value")), true, "an empty field is refused while sensitive");
  await edit.getByLabel(/Sensitive/).uncheck();
  const value = edit.getByLabel("Value");
  assert.equal(await missing(value), true, "an empty field is refused once unticked");
  await edit.getByText("No longer sensitive: enter its value").waitFor();
  await edit.getByRole("button", { name: "Save" }).click();
  assert.deepEqual(
    [(await variables("secrets"))["terraform:password"]?.sensitive, await edit.isVisible()],
    [true, true],
    "nothing was sent: the secret is still there, the form still open",
  );

  await value.fill("now-plain");
  await edit.getByRole("button", { name: "Save" }).click();
  await page.getByRole("cell", { name: "now-plain" }).waitFor();
  const after = (await variables("secrets"))["terraform:password"];
  assert.deepEqual([after?.sensitive, after?.value], [false, "now-plain"]);
  assert.deepEqual(problems(), []);
});

test("a key that is not a variable name is refused by the form with the rule in words", async () => {
  await workspaceWith("keys", {});
  await page.goto(`${server.url}/app/workspaces/keys/variables`);
  const add = page.getByRole("form", { name: "Add a variable" });
  const key = add.getByLabel("Key");
  await key.fill("9lives");
  await add.getByLabel("Value").fill("x");
  await add.getByRole("button", { name: "Add variable" }).click();
  const message = () => key.evaluate((el) => (el as unknown as { validationMessage: string }).validationMessage);
  assert.equal(
    await message(),
    "A terraform variable's name has only letters, digits, _ and -, and does not start with a digit or -.",
  );
  await add.getByLabel("Kind").selectOption("env");
  await key.fill("my-var");
  assert.match(await message(), /^An environment variable's name has only letters, digits and _/);
  await key.fill("MY_VAR");
  assert.equal(await message(), "");
  assert.deepEqual(await variables("keys"), {}, "nothing was sent");
  assert.deepEqual(problems(), []);
});

test("adding a variable whose key is taken is refused and the existing one kept; another kind may share the key", async () => {
  await workspaceWith("dups", { region: { value: "eu-west-1" } });
  await page.goto(`${server.url}/app/workspaces/dups/variables`);
  await page.getByRole("cell", { name: "eu-west-1" }).waitFor();
  const add = page.getByRole("form", { name: "Add a variable" });
  await add.getByLabel("Key").fill("region");
  await add.getByLabel("Value").fill("us-east-1");
  await add.getByRole("button", { name: "Add variable" }).click();
  await add.getByRole("alert").getByText("a terraform variable region already exists; edit it instead").waitFor();
  assert.equal((await variables("dups"))["terraform:region"]?.value, "eu-west-1", "the existing value is kept");

  await add.getByLabel("Kind").selectOption("env");
  await add.getByRole("button", { name: "Add variable" }).click();
  await page.getByRole("cell", { name: "us-east-1" }).waitFor();
  const vars = await variables("dups");
  assert.deepEqual([vars["terraform:region"]?.value, vars["env:region"]?.value], ["eu-west-1", "us-east-1"]);
  assert.deepEqual(problems(), []);
});

test("the key of a variable being edited reads as fixed text, not as a field to type in", async () => {
  await workspaceWith("fixed-key", { region: { value: "eu-west-1" } });
  await page.goto(`${server.url}/app/workspaces/fixed-key/variables`);
  await page.getByRole("button", { name: "Edit terraform variable region" }).click();
  const edit = page.getByRole("form", { name: "Edit terraform variable region" });
  await edit.getByLabel("Value").waitFor();
  assert.equal(await edit.getByRole("textbox", { name: "Key" }).count(), 0, "no text field for the key");
  await edit.getByText("region", { exact: true }).waitFor();
  assert.match((await edit.textContent()) ?? "", /Key\s*region/);
  assert.deepEqual(problems(), []);
});

/** Words of the page's tables and buttons (values aside) that a line break cuts. */
function brokenWords(p: Page): Promise<string[]> {
  return p.evaluate(() => {
    const doc = (globalThis as any).document;
    const broken: string[] = [];
    for (const root of doc.querySelectorAll("main table, main button")) {
      const walker = doc.createTreeWalker(root, 4 /* NodeFilter.SHOW_TEXT */);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        // A variable's value is data, which may break anywhere.
        if (node.parentElement?.closest("td.value")) continue;
        // A break after a hyphen is where a line may end; one inside letters is not.
        for (const match of (node.data as string).matchAll(/[^\s-]+/g)) {
          const range = doc.createRange();
          range.setStart(node, match.index);
          range.setEnd(node, match.index + match[0].length);
          const tops = new Set([...range.getClientRects()].map((r: any) => Math.round(r.top)));
          if (tops.size > 1) broken.push(match[0]);
        }
      }
    }
    return broken;
  });
}

test("at 375 px wide, table cells and buttons keep their words whole and the page does not scroll sideways", async () => {
  await workspaceWith("narrow-screen-with-a-rather-long-workspace-name", {
    a_rather_long_variable_name_for_a_narrow_screen: { value: "eu-west-1,eu-central-1,us-east-1,us-west-2" },
    password: { value: "secret", sensitive: true },
  });
  await server.api(routes.createUserToken, { body: { description: "a token with a long description" } });
  await page.setViewportSize({ width: 375, height: 800 });
  try {
    for (const path of [
      "/app/workspaces/narrow-screen-with-a-rather-long-workspace-name/variables",
      "/app/workspaces",
      "/app/tokens",
    ]) {
      await page.goto(`${server.url}${path}`);
      await page.locator("main table").first().waitFor();
      assert.deepEqual(await brokenWords(page), [], `${path}: no word is cut by a line break`);
      const width = await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number);
      assert.ok(width <= 375, `${path} needs no sideways scrolling at 375 px (${width})`);
    }
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
});
