import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "node:test";
import { routes, type Route } from "@drover/protocol";

// docs/api.md's route reference is generated from the route table (scripts/api-docs.mjs).

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { withRouteReference } = (await import(pathToFileURL(join(repo, "scripts", "api-docs.mjs")).href)) as {
  withRouteReference(doc: string): string;
};
const doc = readFileSync(join(repo, "docs", "api.md"), "utf8");

test("docs/api.md is the reference the route table generates", () => {
  assert.ok(
    withRouteReference(doc) === doc,
    "docs/api.md is out of date: run `npm run build && node scripts/api-docs.mjs`",
  );
});

test("every route of the table has one entry with its auth, and every schema it links to is described", () => {
  for (const [name, route] of Object.entries(routes) as [string, Route][]) {
    const heading = `### \`${route.method} ${route.path}\``;
    const at = doc.indexOf(`${heading}\n`);
    assert.ok(at >= 0, `${name}: no ${heading}`);
    assert.equal(doc.indexOf(`${heading}\n`, at + 1), -1, `${name}: ${heading} twice`);
    const entry = doc.slice(at, doc.indexOf("\n### ", at + 1));
    assert.match(entry, new RegExp(`\\(\`${name}\`\\)`), `${name}: its entry does not name it`);
    assert.match(entry, /\n- Auth: .+\n/, `${name}: no auth`);
    assert.match(entry, /\n- Response: \d{3}/, `${name}: no response`);
  }
  const headings = new Set([...doc.matchAll(/^### (\w+)$/gm)].map((m) => m[1]!.toLowerCase()));
  for (const [, anchor] of doc.matchAll(/\]\(#([\w-]+)\)/g))
    assert.ok(headings.has(anchor!), `a link to #${anchor} has no schema section`);
});
