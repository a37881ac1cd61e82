import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes, type Route } from "@drover/protocol";
import { openApiPath, tfeApi, tfeExtraPaths, tfeRoutes, webUiPaths } from "@drover/server";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * The route table is the one declaration of the HTTP API: the server registers from it and
 * /openapi.json is generated from it. This test holds the three together: every route the
 * server registers is in the served document with the same method, and nothing else is.
 */

let server: TestServer;
const registered: string[] = [];

before(async () => {
  server = await startTestServer({}, { onRoute: (method, path) => registered.push(`${method} ${path}`) });
});
after(() => server?.stop());

const documentMethod = (key: string) => (key.startsWith("x-") ? key.slice(2) : key).toUpperCase();

test("the server registers exactly the routes that /openapi.json documents", async () => {
  const res = await server.api(routes.openapi);
  assert.equal(res.status, 200);
  const documented = Object.entries(res.body.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) =>
    Object.keys(ops).map((m) => `${documentMethod(m)} ${path}`),
  );
  // Fastify adds a HEAD route for every GET by itself; those are not part of the contract.
  // The web UI's page and files are not API routes (server/http/web-ui.ts lists them).
  // The TFE-compatible API has its own table (decision 0068), checked in the next test.
  const ui = new Set<string>([...webUiPaths, ...tfeExtraPaths]);
  const served = registered
    .filter((r) => !r.startsWith("HEAD ") && !ui.has(r.split(" ")[1] ?? ""))
    .filter((r) => !(r.split(" ")[1] ?? "").startsWith(`${tfeApi}/`))
    .map((r) => {
      const [method, path] = r.split(" ") as [string, string];
      return `${method} ${openApiPath(path)}`;
    });
  assert.deepEqual([...new Set(served)].sort(), [...new Set(documented)].sort());
  assert.equal(served.length, new Set(served).size, "no route is registered twice");
  assert.ok(
    served.includes("LOCK /api/v1/workspaces/{ws}/state") && served.includes("UNLOCK /api/v1/workspaces/{ws}/state"),
    "the state backend's lock methods are served and documented",
  );
});

test("the server registers exactly the routes of the TFE table under /api/v2, and the discovery document", () => {
  const served = registered.filter((r) => !r.startsWith("HEAD ") && (r.split(" ")[1] ?? "").startsWith(`${tfeApi}/`));
  const table = tfeRoutes.map((r) => `${r.method} ${r.path}`);
  assert.deepEqual([...served].sort(), [...table].sort());
  assert.equal(table.length, new Set(table).size, "no TFE route is in the table twice");
  assert.ok(registered.includes(`GET ${tfeExtraPaths[0]}`), "the discovery document is served");
});

test("the document gives each route the status its handler answers", async () => {
  const doc = (await server.api(routes.openapi)).body as {
    paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
  };
  assert.ok(doc.paths[routes.createPool.path]?.post?.responses["201"], "POST /pools answers 201");
  const created = await server.api(routes.createPool, { body: { name: "documented" } });
  assert.equal(created.status, 201);
  for (const [name, route] of Object.entries(routes) as [string, Route][]) {
    const method = ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(route.method)
      ? route.method.toLowerCase()
      : `x-${route.method.toLowerCase()}`;
    const op = doc.paths[openApiPath(route.path)]?.[method];
    assert.ok(op, `${name} is documented`);
    assert.ok(op.responses[String(route.response.status)], `${name} documents its ${route.response.status}`);
  }
});
