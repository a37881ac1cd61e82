import assert from "node:assert/strict";
import { AgentClient, FatalAgentError, PoolSession, type PoolSessionOptions } from "@drover/agent";
import { routes } from "@drover/protocol";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { pino } from "pino";
import { until } from "../support/marked-processes.js";
import { startTestServer, type TestServer } from "../support/server.js";

// The pool session every agent process holds, against the real server (what it answers when an
// agent is superseded or its token revoked) and against a small server that answers what a test
// scripts (a 503 asking to come back later, a coded answer no agent expects). Every wait of the
// session goes through a clock the test hands in, so Retry-After is read, never slept.

const log = pino({ level: "silent" });

/** A clock that records each wait and returns at once, except the long heartbeat wait, which it holds until stopped. */
function recordingSleep(): { waits: number[]; sleep: NonNullable<PoolSessionOptions["sleep"]> } {
  const waits: number[] = [];
  return {
    waits,
    sleep: (ms, signal) => {
      if (ms >= 60_000)
        return new Promise<void>((resolve) => {
          if (signal.aborted) resolve();
          signal.addEventListener("abort", () => resolve(), { once: true });
        });
      waits.push(ms);
      return Promise.resolve();
    },
  };
}

function session(client: AgentClient, token: string, extra: Partial<PoolSessionOptions> = {}): PoolSession {
  return new PoolSession({
    client,
    poolToken: token,
    name: "session-test",
    driver: "local",
    capacity: 1,
    pollWaitMs: 200,
    log,
    registeredLog: "registered",
    room: () => "free",
    onJob: () => undefined,
    load: () => ({ runningJobs: 0 }),
    ...extra,
  });
}

describe("against the real server", () => {
  let server: TestServer;
  let poolToken: { id: string; token: string };

  before(async () => {
    server = await startTestServer();
    await server.api(routes.createPool, { body: { name: "sessions" } });
  });
  after(() => server.stop());

  async function newToken(): Promise<{ id: string; token: string }> {
    const tok = await server.api(routes.createPoolToken, { params: { pool: "sessions" }, body: { description: "s" } });
    return { id: tok.body.id, token: tok.body.token };
  }

  test("agent_lost: a session superseded by a namesake registers again and goes on polling", async () => {
    poolToken = await newToken();
    const client = new AgentClient(server.url);
    const registrations: string[] = [];
    const errors: string[] = [];
    const s = session(client, poolToken.token, {
      heartbeatMs: 60_000,
      onRegistered: (reg) => void registrations.push(reg.agentId),
      onError: (kind) => void errors.push(kind),
    });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    // Another registration under the same name supersedes this one: its next poll is refused as agent_lost.
    await client.register(poolToken.token, { name: "session-test", version: "0", driver: "local", capacity: 1 });
    await until("the session to register again", () => registrations.length === 2, 10_000);
    assert.deepEqual(errors, ["session_lost"]);
    assert.notEqual(registrations[0], registrations[1]);
    const agents = await server.api(routes.listAgents, { query: { pool: "sessions" } });
    const mine = agents.body.items.find((a: { id: string }) => a.id === registrations[1]);
    assert.equal(mine.status, "idle", "the new registration is online");
    await s.stop();
    await polling;
  });

  test("token_revoked: polling ends with a FatalAgentError", async () => {
    poolToken = await newToken();
    const s = session(new AgentClient(server.url), poolToken.token, { heartbeatMs: 60_000 });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    assert.equal((await server.api(routes.revokePoolToken, { params: { id: poolToken.id } })).status, 200);
    await assert.rejects(polling, (err: Error) => err instanceof FatalAgentError && /revoked/.test(err.message));
    assert.equal(s.signal.aborted, true, "the session stopped");
    assert.ok(s.fatalError instanceof FatalAgentError);
    await s.stop();
  });

  test("a revoked token at registration rejects start() without a retry", async () => {
    poolToken = await newToken();
    await server.api(routes.revokePoolToken, { params: { id: poolToken.id } });
    const clock = recordingSleep();
    const s = session(new AgentClient(server.url), poolToken.token, { sleep: clock.sleep });
    await assert.rejects(s.start(), FatalAgentError);
    assert.deepEqual(clock.waits, []);
  });

  test("stop during a long-poll: poll() returns at once", async () => {
    poolToken = await newToken();
    const s = session(new AgentClient(server.url), poolToken.token, { pollWaitMs: 30_000, heartbeatMs: 60_000 });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    // The poll is held by the server (no job is queued) when the stop comes.
    await until("the poll to be in flight", async () => {
      const agents = await server.api(routes.listAgents, { query: { pool: "sessions" } });
      return agents.body.items.some((a: { name: string; status: string }) => a.status === "idle");
    });
    const stopped = Date.now();
    await s.stop();
    await polling;
    assert.ok(Date.now() - stopped < 1_000, `poll() took ${Date.now() - stopped} ms to return after stop()`);
  });
});

describe("against a scripted server", () => {
  type Handler = (req: IncomingMessage, res: ServerResponse) => void;
  let handler: Handler = (_req, res) => res.end("{}");
  const scripted = createServer((req, res) => handler(req, res));
  let url: string;
  const registered = {
    agentId: "agt_1",
    poolId: "pool_1",
    poolName: "scripted",
    sessionToken: "session",
    heartbeatIntervalMs: 60_000,
    leaseTtlMs: 60_000,
    maxPollWaitMs: 60_000,
  };
  const answer = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));

  before(async () => {
    await new Promise<void>((r) => scripted.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(scripted.address() as AddressInfo).port}`;
  });
  after(() => {
    scripted.closeAllConnections();
    scripted.close();
  });

  test("a 503 with Retry-After: registration and polls wait as long as the server asked", async () => {
    const calls: string[] = [];
    handler = (req, res) => {
      calls.push(req.url!.replace(/\?.*/, ""));
      const n = calls.length;
      if (n === 1) return answer(res, 503, { error: "unavailable", message: "starting" }, { "retry-after": "7" });
      if (n === 2) return answer(res, 200, registered);
      if (n === 3) return answer(res, 503, { error: "unavailable", message: "busy" }, { "retry-after": "4" });
      // Past the agent's cap: it waits 30 s at most, whatever the server asks.
      if (n === 4) return answer(res, 429, { error: "too_many_requests", message: "slow" }, { "retry-after": "3600" });
      return answer(res, 200, { job: null });
    };
    const clock = recordingSleep();
    const s = session(new AgentClient(url), "pool", { sleep: clock.sleep });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    await until("two polls after the refusals", () => calls.length >= 6);
    await s.stop();
    await polling;
    assert.deepEqual(clock.waits, [7_000, 4_000, 30_000]);
  });

  test("without Retry-After, registration backs off exponentially", async () => {
    let n = 0;
    handler = (req, res) => {
      if (!req.url!.endsWith("/register")) return answer(res, 200, { job: null });
      return ++n <= 4
        ? answer(res, 502, { error: "server_unreachable", message: "proxy" })
        : answer(res, 200, registered);
    };
    const clock = recordingSleep();
    const s = session(new AgentClient(url), "pool", { sleep: clock.sleep });
    assert.equal(await s.start(), true);
    await s.stop();
    assert.deepEqual(clock.waits, [500, 1_000, 2_000, 4_000]);
  });

  test("a coded poll answer the session does not expect is retried, not the end of the process", async () => {
    let polls = 0;
    handler = (req, res) => {
      if (req.url!.endsWith("/register")) return answer(res, 200, { ...registered, sessionToken: "coded" });
      // An aborted poll of an earlier test may still arrive: only this session's count.
      if (req.headers.authorization !== "Bearer coded") return answer(res, 200, { job: null });
      polls++;
      if (polls === 1) return answer(res, 404, { error: "not_found", message: "no such route" });
      return answer(res, 200, { job: null });
    };
    const clock = recordingSleep();
    const errors: string[] = [];
    const s = session(new AgentClient(url), "pool", { sleep: clock.sleep, onError: (k) => void errors.push(k) });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    await until("polls after the refused one", () => polls >= 3);
    await s.stop();
    await polling;
    assert.deepEqual(errors, ["poll"]);
    assert.deepEqual(clock.waits, [1_000]);
  });

  test("a full process waits for room and polls again once told", async () => {
    let polls = 0;
    handler = (req, res) => {
      if (req.url!.endsWith("/register")) return answer(res, 200, { ...registered, sessionToken: "room" });
      if (req.headers.authorization === "Bearer room") polls++;
      return answer(res, 200, { job: null });
    };
    let room: "free" | "full" = "full";
    const s = session(new AgentClient(url), "pool", { heartbeatMs: 60_000, roomRecheckMs: 60_000, room: () => room });
    assert.equal(await s.start(), true);
    const polling = s.poll();
    await new Promise((r) => setImmediate(r));
    assert.equal(polls, 0, "no poll while full");
    room = "free";
    s.roomFreed();
    await until("a poll once room was freed", () => polls >= 1);
    await s.stop();
    await polling;
  });
});
