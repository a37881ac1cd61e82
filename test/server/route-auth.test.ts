import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes, type AuthKind, type Route } from "@drover/protocol";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routeCall, type RouteInput } from "../support/typed-api.js";

/*
 * The auth a route declares in the table is the auth the server runs: every route of the table,
 * called with a genuine credential of each kind its auth kind does not admit, is refused by that
 * kind's check (its message names the credential the route needs), before any handler runs.
 */

type Credential = "user" | "pool" | "session" | "job";

/** The credentials each auth kind admits. */
const admits: Record<Exclude<AuthKind, "none">, Credential[]> = {
  user: ["user"],
  pool: ["pool"],
  session: ["session"],
  job: ["job"],
  state: ["user", "job"],
};

/** What each auth kind's refusal says. */
const refusal: Record<Exclude<AuthKind, "none">, RegExp> = {
  user: /cannot use the user API/,
  pool: /needs a pool token/,
  session: /needs the agent session token/,
  job: /needs the job token/,
  state: /cannot use the user API/,
};

let server: TestServer;
const tokens = {} as Record<Credential, string>;

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "auth" } });
  const { poolToken, session } = await registerAgent(server, "auth", "auth-agent");
  await queueRun(server, "auth", "auth-ws", rawTarGz([{ path: "main.tf", content: "" }]));
  const polled = await call(server, routes.pollJob, session, { query: { wait: 5000 } });
  assert.ok(polled.body.job, "the agent got a job");
  Object.assign(tokens, { user: server.adminToken, pool: poolToken, session, job: polled.body.job.jobToken });
});
after(() => server?.stop());

/** A request to `route` with `token` and no body: authentication answers before the body would be read. */
async function send(route: Route, token: string): Promise<{ status: number; body: { message?: string } }> {
  const params = Object.fromEntries([...route.path.matchAll(/:(\w+)/g)].map((m) => [m[1]!, "x"]));
  const res = await routeCall(server.url, route as Route, { token, params } as RouteInput<Route>);
  return { status: res.status, body: typeof res.body === "object" && res.body !== null ? res.body : {} };
}

test("every route refuses the credentials its declared auth kind does not admit", async () => {
  const cases = (Object.entries(routes) as [string, Route][]).flatMap(([name, route]) =>
    route.auth === "none"
      ? []
      : (Object.keys(tokens) as Credential[])
          .filter((credential) => !admits[route.auth as Exclude<AuthKind, "none">].includes(credential))
          .map((credential) => ({ name, route, kind: route.auth as Exclude<AuthKind, "none">, credential })),
  );
  const checked: string[] = [];
  // A few at a time: each is one request, and the answers do not depend on one another.
  for (let i = 0; i < cases.length; i += 8) {
    await Promise.all(
      cases.slice(i, i + 8).map(async ({ name, route, kind, credential }) => {
        const res = await send(route, tokens[credential]);
        const where = `${name} (${kind}) with a ${credential} token: ${res.status} ${JSON.stringify(res.body)}`;
        assert.ok(res.status === 401 || res.status === 403, where);
        assert.match(res.body.message ?? "", refusal[kind], where);
        checked.push(`${kind}/${credential}`);
      }),
    );
  }
  // Each auth kind met each credential it refuses.
  assert.deepEqual(
    [...new Set(checked)].sort(),
    Object.entries(admits)
      .flatMap(([kind, ok]) =>
        Object.keys(tokens).flatMap((c) => (ok.includes(c as Credential) ? [] : [`${kind}/${c}`])),
      )
      .sort(),
  );
});

test("the credential a route's kind admits reaches its handler, which gets the caller of that kind", async () => {
  // Register answers with the pool of the pool token's caller; heartbeat with the session's.
  const reg = await call(server, routes.register, tokens.pool, {
    body: { name: "second", version: "test", driver: "local", capacity: 1 },
  });
  assert.equal(reg.status, 200);
  assert.equal(reg.body.poolName, "auth");
  const demand = await call(server, routes.agentDemand, tokens.pool, {});
  assert.equal(demand.status, 200, JSON.stringify(demand.body));
  // A job token for another job than the path's is refused by the job check, with the job it belongs to.
  const other = await send(routes.jobVariables, tokens.job);
  assert.equal(other.status, 403);
  assert.match(other.body.message ?? "", /this job token belongs to job .+, not x/);
});
