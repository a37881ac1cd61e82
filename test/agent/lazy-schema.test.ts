import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { z } from "zod";
import {
  ApiError,
  builtLazySchemas,
  DroverClient,
  pollResponseSchema,
  routes,
  userApi,
  workspaceSchema,
} from "@drover/protocol";

// The protocol's schemas and routes are built on first use (protocol/lazy-schema.ts; SPEC §8).
// These tests fail when a lazy schema checks differently from the schema it stands for, or when
// the client no longer refuses an answer outside the contract.

const assignment = {
  jobId: "job-0123456789abcdef",
  attempt: 1,
  jobToken: "t",
  phase: "plan",
  runId: "run-0123456789abcdef",
  planOnly: false,
  isDestroy: false,
  workspace: { id: "ws-0123456789abcdef", name: "w", engine: "terraform", engineVersion: null, workingDirectory: "" },
  configurationVersionId: "cv-0123456789abcdef",
  statePath: `${userApi}/workspaces/ws-0123456789abcdef/state`,
  leaseTtlMs: 30_000,
};

test("a lazy schema is its schema: same type checks, same answers, same issues, same methods", () => {
  assert.ok(pollResponseSchema instanceof z.ZodObject, "instanceof sees the built schema");
  assert.ok(z.array(pollResponseSchema) instanceof z.ZodArray);
  assert.deepEqual(Object.keys(pollResponseSchema.shape), ["job"]);
  assert.ok(builtLazySchemas.includes("pollResponseSchema"), "reading it built it");
  // A default filled in, deep inside (the workspace's runner image), as the built schema does.
  assert.equal(pollResponseSchema.parse({ job: assignment }).job?.workspace.runnerImage, null);
  assert.deepEqual(pollResponseSchema.parse({ job: null }), { job: null });
  // A copy made outside the stand-in answers exactly as the stand-in does.
  const copy = z.object({ job: z.array(pollResponseSchema).element.shape.job });
  for (const bad of [
    { job: { ...assignment, phase: "destroy" } },
    { job: { ...assignment, attempt: "1" } },
    {},
    null,
  ]) {
    const lazy = pollResponseSchema.safeParse(bad);
    const built = copy.safeParse(bad);
    assert.equal(lazy.success, false);
    assert.deepEqual(lazy.error?.issues, built.error?.issues);
  }
  // Methods that make new schemas from it (extend, pick) keep its checks.
  const extended = workspaceSchema.extend({ extra: z.string() }).pick({ extra: true, name: true });
  assert.equal(extended.safeParse({ name: "w", extra: "x" }).success, true);
  assert.equal(extended.safeParse({ name: 1, extra: "x" }).success, false);
});

test("a route of the table is built on first use, and the client refuses an answer outside its schema", async () => {
  const answers: unknown[] = [{ ok: "yes" }, { ok: true, dropPlanRuns: ["run-1"] }];
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () =>
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answers.shift())),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const client = new DroverClient({
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      token: "t",
    });
    await assert.rejects(client.call(routes.agentHeartbeat, { body: { runningJobs: 0 } }), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.code, "unexpected_response");
      assert.match(err.message, /answered outside the API contract: [^]*"ok"/);
      return true;
    });
    assert.ok(
      builtLazySchemas.includes("routes.agentHeartbeat") && builtLazySchemas.includes("agentHeartbeatResponseSchema"),
    );
    assert.deepEqual(await client.call(routes.agentHeartbeat, { body: { runningJobs: 0 } }), {
      ok: true,
      dropPlanRuns: ["run-1"],
    });
  } finally {
    server.close();
  }
});
