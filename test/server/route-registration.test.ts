import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Fastify from "fastify";
import { routePath, routes, userApi } from "@drover/protocol";
import { pino } from "pino";
import { DroverError, InvalidSettingError } from "@drover/protocol";
import { loadServerConfig, registrar, type Authenticators } from "@drover/server";
import { spawnDrover } from "../support/processes.js";

/*
 * Handlers registered from the route table: a result of the wrong shape does not compile
 * (checked by tsc over this file: each @ts-expect-error must meet an error), and with
 * validateResponses one that slips past the compiler is refused at run time.
 */

const refused = async (): Promise<never> => {
  throw new DroverError("unauthorized", "not in this test");
};
/** Every request is a user's; no other kind of caller exists here. */
const anyUser: Authenticators = {
  user: async () => ({ tokenId: "t" }),
  pool: refused,
  session: refused,
  job: refused,
  state: refused,
};

async function appWith(validateResponses: boolean, result: unknown, logged?: string[]) {
  const app = Fastify({
    loggerInstance: pino({ level: logged ? "error" : "silent" }, { write: (line: string) => void logged?.push(line) }),
  });
  await app.register(
    async (scope) => {
      const serve = registrar(scope, userApi, { validateResponses, authenticators: anyUser });
      // A cast: what an `any` from a store or a JSON.parse can do to the compiler's view.
      serve(routes.getPool, async () => result as { id: string; name: string; kind: "runs"; createdAt: string });
    },
    { prefix: userApi },
  );
  return app;
}

test("with validateResponses, a result outside the response schema is a 500, not a wrong answer", async () => {
  const app = await appWith(true, { id: "pool-1", name: "p" });
  try {
    const res = await app.inject({ method: "GET", url: routePath(routes.getPool, { pool: "p" }) });
    assert.equal(res.statusCode, 500);
    assert.match(res.body, /answered outside its response schema/);
  } finally {
    await app.close();
  }
});

test("a result inside the schema is answered with the table's status and content type", async () => {
  const app = await appWith(true, { id: "pool-1", name: "p", kind: "runs", createdAt: "2026-01-01T00:00:00.000Z" });
  try {
    const res = await app.inject({ method: "GET", url: routePath(routes.getPool, { pool: "p" }) });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers["content-type"]), /application\/json/);
  } finally {
    await app.close();
  }
});

test("without validateResponses (production) the handler's result goes out as it is", async () => {
  const app = await appWith(false, { id: "pool-1", name: "p" });
  try {
    assert.equal((await app.inject({ method: "GET", url: routePath(routes.getPool, { pool: "p" }) })).statusCode, 200);
  } finally {
    await app.close();
  }
});

test("an answer outside the schema is logged as an error naming the route", async () => {
  const logged: string[] = [];
  const app = await appWith(true, { id: "pool-1", name: "p" }, logged);
  try {
    assert.equal((await app.inject({ method: "GET", url: routePath(routes.getPool, { pool: "p" }) })).statusCode, 500);
    const errors = logged
      .map((l) => JSON.parse(l) as { level: number; err?: { message?: string } })
      .filter((l) => l.level >= 50);
    assert.ok(
      errors.some((l) => l.err?.message?.includes(`GET ${routes.getPool.path} answered outside its response schema`)),
      logged.join("\n"),
    );
  } finally {
    await app.close();
  }
});

test("DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: off unless set, a bad value is refused at start", () => {
  assert.equal(loadServerConfig({ env: {} }).validateResponses, false);
  assert.equal(loadServerConfig({ env: { DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "true" } }).validateResponses, true);
  assert.throws(
    () => loadServerConfig({ env: { DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "sometimes" } }),
    (err: unknown) => err instanceof InvalidSettingError && err.setting === "DROVER_DIAGNOSTICS_VALIDATE_RESPONSES",
  );
});

test("the real server binary the tests start checks its answers (test support turns the setting on)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-diagnostics-"));
  const proc = spawnDrover(["server", "--port", "0", "--data-dir", dir], { ...process.env, DROVER_LOG_LEVEL: "warn" });
  try {
    await proc.waitFor(/every JSON answer is checked against the route table/, 30_000);
  } finally {
    await proc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

// Compile-time checks only: never registered.
export function wrongResultsDoNotCompile(serve: ReturnType<typeof registrar>): void {
  // @ts-expect-error a pool without createdAt is not a pool
  serve(routes.getPool, async () => ({ id: "pool-1", name: "p" }));
  // @ts-expect-error a list route answers {items}, not an array
  serve(routes.listPools, async () => []);
  // @ts-expect-error an empty (204) route answers nothing
  serve(routes.deleteWorkspace, async () => ({ deleted: true }));
}

// Compile-time checks only: the caller a handler gets has the type of its route's auth kind.
export function callersAreTypedByAuthKind(serve: ReturnType<typeof registrar>): void {
  serve(routes.agentDemand, async ({ caller }) => ({ pool: caller.pool.name, demand: 0 }) as never);
  // @ts-expect-error a user route's caller is a user token, with no pool
  serve(routes.listPools, async ({ caller }) => ({ items: [caller.pool] }));
  serve(routes.readState, async ({ caller }) => (caller.job === null ? null : Buffer.from(caller.job.id)));
  // @ts-expect-error a route without auth has no caller
  serve(routes.healthz, async ({ caller }) => ({ status: caller.tokenId }));
}
