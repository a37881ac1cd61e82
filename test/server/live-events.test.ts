import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { csrfHeader, routes } from "@drover/protocol";
import { queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routeCall } from "../support/typed-api.js";

/*
 * The live event stream of the web UI (GET /api/v1/events) over real HTTP: it needs a user
 * token or session, names what changed as it changes, and ends when the session does (checked
 * at each keep-alive, shortened here) or the server stops.
 */

const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);
let server: TestServer;
before(async () => {
  server = await startTestServer({}, { liveKeepAliveMs: 100 });
  await server.api(routes.createPool, { body: { name: "live" } });
});
after(() => server?.stop());

interface Stream {
  status: number;
  contentType: string | null;
  /** Waits until an event of `name` carrying `data` came (or the stream ends: that fails). */
  waitFor(name: string, data?: string): Promise<void>;
  /** Resolves when the server ends the stream. */
  ended: Promise<void>;
  close(): void;
}

async function open(headers: Record<string, string>): Promise<Stream> {
  const abort = new AbortController();
  const url = `${server.url}${routes.liveEvents.path}`;
  // A stream: the typed client reads whole bodies, so this reads the response as it comes.
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(url, { headers, signal: abort.signal });
  let text = "";
  const waiters = new Set<() => void>();
  let done = false;
  const ended = (async () => {
    try {
      const decoder = new TextDecoder();
      for await (const chunk of res.body ?? []) {
        text += decoder.decode(chunk as Uint8Array, { stream: true });
        for (const wake of waiters) wake();
      }
    } catch {
      // Closed by the test.
    }
    done = true;
    for (const wake of waiters) wake();
  })();
  const has = (name: string, data?: string) =>
    text.split("\n\n").some((block) => {
      const lines = block.split("\n");
      return lines.includes(`event: ${name}`) && (data === undefined || lines.includes(`data: ${data}`));
    });
  return {
    status: res.status,
    contentType: res.headers.get("content-type"),
    ended,
    close: () => abort.abort(),
    waitFor: (name, data) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (has(name, data)) {
            waiters.delete(check);
            resolve();
          } else if (done) {
            waiters.delete(check);
            reject(new Error(`the stream ended without event ${name} ${data ?? ""}:\n${text}`));
          }
        };
        waiters.add(check);
        check();
      }),
  };
}

test("without a token or session the stream is refused", async () => {
  const res = await routeCall(server.url, routes.liveEvents, {});
  assert.equal(res.status, 401);
});

test("a run's changes and an agent's arrival come as events naming them", async () => {
  const stream = await open({ authorization: `Bearer ${server.adminToken}` });
  try {
    assert.equal(stream.status, 200);
    assert.match(stream.contentType ?? "", /^text\/event-stream/);
    const { runId } = await queueRun(server, "live", "live-ws", archive);
    await stream.waitFor("run", runId);
    await registerAgent(server, "live", "live-agent");
    await stream.waitFor("agents");
    const cancelled = await server.api(routes.cancelRun, { params: { id: runId } });
    assert.equal(cancelled.status, 200);
    await stream.waitFor("run", runId);
  } finally {
    stream.close();
  }
});

test("signing out ends a browser's stream at the next keep-alive", async () => {
  const signIn = await routeCall(server.url, routes.createWebSession, { body: { token: server.adminToken } });
  const cookie = (signIn.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
  const stream = await open({ cookie });
  assert.equal(stream.status, 200);
  const out = await routeCall(server.url, routes.deleteWebSession, {
    headers: { cookie, [csrfHeader]: signIn.body.csrfToken as string },
  });
  assert.equal(out.status, 204);
  await stream.ended;
});

test("stopping the server ends the stream", async () => {
  const own = await startTestServer({}, { liveKeepAliveMs: 60_000 });
  const abort = new AbortController();
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(`${own.url}${routes.liveEvents.path}`, {
    headers: { authorization: `Bearer ${own.adminToken}` },
    signal: abort.signal,
  });
  assert.equal(res.status, 200);
  const body = (async () => {
    for await (const _chunk of res.body ?? []) {
      // Read until the server ends it.
    }
  })();
  await own.stop();
  await body;
});
