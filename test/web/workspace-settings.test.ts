import assert from "node:assert/strict";
import { test } from "node:test";
import { routes, updateWorkspaceSchema } from "@drover/protocol";
import type { Page } from "playwright-core";
import { accessibilityViolations, useSignedInPage } from "../support/browser.js";
import type { TestServer } from "../support/server.js";

// The workspace settings form when the server refuses a save: each problem the server ties to a
// field is shown beside that field, anything else at the top of the form in the server's words.

let server: TestServer;
let page: Page;
let problems: () => string[];
useSignedInPage((ui) => ({ server, page, problems } = ui));

async function settingsOf(name: string) {
  const ws = await server.api(routes.createWorkspace, { body: { name, pool: "p" } });
  assert.equal(ws.status, 201, JSON.stringify(ws.body));
  await page.goto(`${server.url}/app/workspaces/${name}/settings`);
  const form = page.getByRole("form", { name: "Workspace settings" });
  await form.getByLabel("Engine version").waitFor();
  return form;
}

/** The text a field's aria-describedby points at, and whether the field is marked invalid. */
function fieldState(field: ReturnType<Page["getByLabel"]>) {
  return field.evaluate((el) => {
    const doc = (globalThis as any).document;
    const ids = (el.getAttribute("aria-describedby") ?? "").split(" ").filter((id: string) => id !== "");
    const described = ids.map((id: string) => doc.getElementById(id)?.textContent ?? `(no #${id})`).join(" ");
    return { invalid: el.getAttribute("aria-invalid"), described };
  });
}

test("a refused engine version and runner image are each shown beside their field, in the server's words", async () => {
  const form = await settingsOf("bad-fields");
  const bad = { engineVersion: "newest", runnerImage: "Not An Image" };
  // What the wire contract says of each field, which the server's answer carries.
  const checked = updateWorkspaceSchema.safeParse(bad);
  const said = Object.fromEntries((checked.error?.issues ?? []).map((i) => [i.path.join("."), i.message]));
  assert.deepEqual(Object.keys(said).sort(), ["engineVersion", "runnerImage"]);

  await form.getByLabel("Engine version").fill(bad.engineVersion);
  await form.getByLabel("Runner image").fill(bad.runnerImage);
  await form.getByRole("button", { name: "Save settings" }).click();
  await form.getByRole("alert").waitFor();
  assert.deepEqual(
    {
      version: await fieldState(form.getByLabel("Engine version")),
      image: await fieldState(form.getByLabel("Runner image")),
      dir: await fieldState(form.getByLabel("Working directory")),
    },
    {
      version: { invalid: "true", described: said.engineVersion },
      image: { invalid: "true", described: said.runnerImage },
      dir: { invalid: null, described: "" },
    },
  );
  assert.equal(
    await page.evaluate(() => (globalThis as any).document.activeElement?.id),
    "set-version",
    "the first field at fault has the focus",
  );
  assert.doesNotMatch((await form.textContent()) ?? "", /invalid request body|engineVersion|runnerImage/);
  assert.deepEqual(await accessibilityViolations(page), []);
  assert.equal((await server.api(routes.getWorkspace, { params: { ws: "bad-fields" } })).body.engineVersion, null);

  await form.getByLabel("Engine version").fill("1.9.8");
  await form.getByLabel("Runner image").fill("");
  await form.getByRole("button", { name: "Save settings" }).click();
  await form.getByRole("status").getByText("Saved.").waitFor();
  assert.deepEqual(await fieldState(form.getByLabel("Engine version")), { invalid: null, described: "" });
  assert.equal(await form.getByRole("alert").count(), 0);
  assert.deepEqual(problems(), []);
});

test("a refusal that names no field is said at the top of the form, as the server worded it", async () => {
  const form = await settingsOf("bad-consumer");
  const refused = await server.api(routes.updateWorkspace, {
    params: { ws: "bad-consumer" },
    body: { remoteStateConsumers: ["no-such-workspace"] },
  });
  assert.equal(refused.status, 404, JSON.stringify(refused.body));

  await form.getByLabel(/Workspaces whose runs may read this state/).fill("no-such-workspace");
  await form.getByRole("button", { name: "Save settings" }).click();
  const alert = form.getByRole("alert");
  await alert.waitFor();
  assert.equal(await alert.textContent(), refused.body.message);
  assert.equal(
    await form.evaluate((f) => f.firstElementChild?.getAttribute("role")),
    "alert",
    "the alert opens the form, above its fields",
  );
  assert.deepEqual(problems(), []);
});
