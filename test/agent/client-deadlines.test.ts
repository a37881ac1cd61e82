import assert from "node:assert/strict";
import { AgentClient, NetworkError, waitFor, withRetry } from "@drover/agent";
import { parseRetryAfterMs } from "@drover/runtime";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";

// The agent's HTTP client against a server that misbehaves on purpose: one that never answers,
// and one that asks it to come back later (503/429 with Retry-After).

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
let handler: Handler = (_req, res) => res.end("{}");
const server = createServer((req, res) => handler(req, res));
let url: string;

before(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

test("a call the server never answers ends at its deadline as a NetworkError", async () => {
  handler = () => undefined;
  const client = new AgentClient(url, undefined, { requestMs: 300 });
  const started = Date.now();
  await assert.rejects(
    client.deregister("session"),
    (err: Error) => err instanceof NetworkError && /no answer .* within 300 ms/.test(err.message),
  );
  assert.ok(Date.now() - started < 10_000);
});

test("a long-poll's deadline is its wait plus the slack", async () => {
  handler = () => undefined;
  const client = new AgentClient(url, undefined, { requestMs: 100, longPollSlackMs: 200 });
  const started = Date.now();
  await assert.rejects(client.poll("session", 400), NetworkError);
  assert.ok(Date.now() - started >= 550, "the poll was not cut before its wait");
});

test("the caller's stop signal ends a call at once, and is not a NetworkError", async () => {
  handler = () => undefined;
  const client = new AgentClient(url);
  const stop = new AbortController();
  const call = client.deregister("session", stop.signal);
  stop.abort();
  await assert.rejects(call, (err: Error) => !(err instanceof NetworkError));
});

test("503 and 429 with Retry-After: the client reports the wait and withRetry honours it", async () => {
  let calls = 0;
  const times: number[] = [];
  handler = (_req, res) => {
    calls++;
    times.push(Date.now());
    if (calls === 1)
      res
        .writeHead(503, { "retry-after": "1", "content-type": "application/json" })
        .end('{"error":"unavailable","message":"database away"}');
    else if (calls === 2)
      res
        .writeHead(429, { "retry-after": "1", "content-type": "application/json" })
        .end('{"error":"rate_limited","message":"slow down"}');
    else res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
  };
  const client = new AgentClient(url);
  await assert.rejects(
    client.deregister("s"),
    (err: Error) => err instanceof NetworkError && err.retryAfterMs === 1000,
  );
  calls = 0;
  times.length = 0;
  await withRetry(() => client.deregister("s"), new AbortController().signal);
  assert.equal(calls, 3);
  assert.ok(times[1]! - times[0]! >= 950, `waited ${times[1]! - times[0]!} ms after a 503 asking for 1 s`);
  assert.ok(times[2]! - times[1]! >= 950, `waited ${times[2]! - times[1]!} ms after a 429 asking for 1 s`);
});

test("Retry-After reads seconds and HTTP dates; the agent's wait is capped", () => {
  assert.equal(parseRetryAfterMs("3600"), 3_600_000);
  assert.equal(waitFor({ retryAfterMs: parseRetryAfterMs("3600") }, 500), 30_000);
  assert.equal(parseRetryAfterMs(new Date(Date.now() + 5_000).toUTCString(), Date.now())! > 3_000, true);
  assert.equal(parseRetryAfterMs("soon"), undefined);
  assert.equal(parseRetryAfterMs(undefined), undefined);
});

test("withRetry stops retrying when its signal aborts, even in a long Retry-After wait", async () => {
  handler = (_req, res) => res.writeHead(503, { "retry-after": "30" }).end("{}");
  const client = new AgentClient(url);
  const stop = new AbortController();
  const started = Date.now();
  const call = withRetry(() => client.deregister("s"), stop.signal);
  setTimeout(() => stop.abort(), 200);
  await assert.rejects(call, NetworkError);
  assert.ok(Date.now() - started < 5_000, "the wait was interrupted");
});

test("a job's download that stops mid-body is given up on the progress deadline, tried again, then its budget ends it", async () => {
  let tries = 0;
  handler = (_req, res) => {
    tries++;
    res.writeHead(200, { "content-type": "application/gzip", "content-length": "1000" }).write(Buffer.alloc(10));
  };
  // A plain record, so that the deadlines are the client's own whatever their names.
  // (The budget leaves room for a second try on a busy machine.)
  const timeouts = { requestMs: 300, transferRetryMs: 3_000 };
  const job = new AgentClient(url, undefined, timeouts).job("j1", "token");
  const started = Date.now();
  await assert.rejects(job.configuration(new AbortController().signal), (err: Error) => {
    assert.match(
      err.message,
      /^gave up downloading the configuration archive after \d+ tries in \d+ s: .*sent nothing for 300 ms/,
    );
    return true;
  });
  assert.ok(tries >= 2, `tried ${tries} times`);
  assert.ok(Date.now() - started < 15_000, `took ${Date.now() - started} ms`);
});
