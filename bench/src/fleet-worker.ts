// A child process simulating many agents: each registers, long-polls continuously and
// heartbeats on the interval the server gives. Heartbeat latency is sampled only in the
// steady window [warm-up, warm-up + duration]: the start-up burst (every agent registering
// and connecting at once) is reported separately by the caller, not mixed into the p99.
// Prints one JSON line at the end.
//
// Each simulated agent holds what a real one does: its own long-poll on one keep-alive
// connection and its heartbeats on another (the agent's undici pool opens a second
// connection because the first is busy with the poll), at the interval the server gives.
// The requests are written and their answers read by a minimal HTTP/1.1 client on `net`
// (HttpConnection below) instead of the typed client: the server sees the same requests on
// the same number of sockets, and the fleet, which shares the 2 cores with the server, costs
// a fraction of the CPU (undici plus the answer's schema check per call made the fleet use
// 2–5× the server's CPU, bench/notes/issue-18.md). Registration uses the typed client.
import { connect, type Socket } from "node:net";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { routes } from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import { Agent } from "undici";

const dispatcher = new Agent({ connections: null, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 });

/** One keep-alive HTTP/1.1 connection, one request at a time; reconnects after a close. */
class HttpConnection {
  private socket: Socket | undefined;
  private buffered: Buffer = Buffer.alloc(0);
  private waiting:
    | { resolve: (a: { status: number; body: string }) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }
    | undefined;

  constructor(
    private readonly host: string,
    private readonly port: number,
  ) {}

  /** Sends one request and resolves with the answer's status and body; rejects on close or after `timeoutMs`. */
  request(
    method: string,
    path: string,
    token: string,
    body: string | undefined,
    timeoutMs: number,
  ): Promise<{ status: number; body: string }> {
    const socket = this.socket ?? this.open();
    const head = `${method} ${path} HTTP/1.1\r\nhost: ${this.host}:${this.port}\r\nauthorization: Bearer ${token}\r\n`;
    socket.write(
      body === undefined
        ? `${head}content-length: 0\r\n\r\n`
        : `${head}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => this.fail(new Error(`no answer from the server within ${timeoutMs} ms (${method} ${path})`)),
        timeoutMs,
      );
      this.waiting = { resolve, reject, timer };
    });
  }

  /** Closes the connection; a request in flight fails with `reason`. */
  close(reason = new Error("closed")): void {
    this.fail(reason);
  }

  private open(): Socket {
    const socket = connect({ host: this.host, port: this.port, noDelay: true });
    this.socket = socket;
    this.buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
      this.parse();
    });
    socket.on("error", (err) => this.fail(err));
    socket.on("close", () => this.fail(new Error("the server closed the connection")));
    return socket;
  }

  private parse(): void {
    const end = this.buffered.indexOf("\r\n\r\n");
    if (end < 0 || !this.waiting) return;
    const head = this.buffered.subarray(0, end).toString("latin1");
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
    if (Number.isNaN(length)) return this.fail(new Error(`an answer without content-length: ${head.slice(0, 200)}`));
    if (this.buffered.length < end + 4 + length) return;
    const body = this.buffered.subarray(end + 4, end + 4 + length).toString("utf8");
    this.buffered = this.buffered.subarray(end + 4 + length);
    const { resolve, timer } = this.waiting;
    this.waiting = undefined;
    clearTimeout(timer);
    if (/\r\nconnection: *close/i.test(head)) this.drop();
    resolve({ status: Number(head.slice(9, 12)), body });
  }

  private fail(err: Error): void {
    this.drop();
    const w = this.waiting;
    this.waiting = undefined;
    if (w) {
      clearTimeout(w.timer);
      w.reject(err);
    }
  }

  private drop(): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.removeAllListeners("close");
    socket?.destroy();
  }
}

const [url, token, countArg, durationArg, prefix, warmupArg, heartbeatTimeoutArg] = process.argv.slice(2);
const count = Number(countArg);
const durationMs = Number(durationArg);
const warmupMs = Number(warmupArg ?? 8000);
const heartbeatTimeoutMs = Number(heartbeatTimeoutArg ?? 60_000);
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

const client = new DroverClient({ baseUrl: url!, dispatcher });

const { hostname, port } = new URL(url!);
const pollPath = `${routes.pollJob.path}?wait=25000`;
const heartbeatBody = JSON.stringify({ runningJobs: 0 });
// The steady window, set when the parent says go (a line on stdin, to every worker at once, so
// the windows of the workers coincide); until then agents run unmeasured.
let windowStart = Infinity;
let windowEnd = Infinity;
const latencies: number[] = [];
let windowCpu: { at: number; usage: NodeJS.CpuUsage } | undefined;
let errors = 0;
/** Heartbeats sent in the steady window that failed (timed out, refused, a non-200 answer). */
let heartbeatFailures = 0;
/** The first few distinct failures, so a failing fleet says why. */
const errorKinds = new Set<string>();
const failed = (err: unknown) => {
  errors++;
  if (errorKinds.size < 5) errorKinds.add(err instanceof Error ? err.message.slice(0, 200) : String(err));
};
/** A call's answer, or a failure for any status but 200. */
const ok = (answer: { status: number; body: string }) => {
  if (answer.status !== 200) throw new Error(`HTTP ${answer.status}: ${answer.body.slice(0, 200)}`);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One agent from its registration to the window's end: a long-poll always out, heartbeats at its interval. */
async function runAgent(session: string, interval: number, i: number): Promise<void> {
  const pollConnection = new HttpConnection(hostname, Number(port));
  const heartbeatConnection = new HttpConnection(hostname, Number(port));
  let stopping = false;
  const polling = (async () => {
    while (!stopping) {
      try {
        ok(await pollConnection.request("POST", pollPath, session, undefined, 40_000));
      } catch (err) {
        if (stopping) break;
        failed(err);
        // A refused or failed poll is not retried at once: a lost agent would spin.
        await sleep(1000);
      }
    }
  })();
  await sleep((i * 7919) % interval);
  while (performance.now() < windowEnd) {
    const t = performance.now();
    try {
      ok(
        await heartbeatConnection.request(
          "POST",
          routes.agentHeartbeat.path,
          session,
          heartbeatBody,
          heartbeatTimeoutMs,
        ),
      );
      if (t >= windowStart && t < windowEnd) latencies.push(performance.now() - t);
    } catch (err) {
      failed(err);
      // Counted apart from the latencies: the parent puts each at the timeout in the p99.
      if (t >= windowStart && t < windowEnd) heartbeatFailures++;
    }
    await sleep(interval);
  }
  stopping = true;
  heartbeatConnection.close();
  pollConnection.close();
  await polling;
}

/**
 * Registers one agent, trying again (as a real agent does) when the server cannot be reached: a
 * thousand agents connecting at once can fill a busy server's accept queue. Each failure counts.
 */
async function register(name: string): Promise<{ sessionToken: string; heartbeatIntervalMs: number }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.call(routes.register, {
        token,
        body: { name, version: "bench", driver: "local", capacity: 1 },
      });
    } catch (err) {
      if ((err as { code?: string }).code !== "server_unreachable" || attempt === 5) throw err;
      failed(err);
      await sleep(1000 * attempt);
    }
  }
}

// A few registrations at a time, each agent starting its polls and heartbeats as soon as it is
// registered (as a real agent does): registered one by one and started together, a loaded
// machine took over a minute for a worker's thousand and the first were declared lost.
const registerConcurrency = 16;
const agents: Array<Promise<void>> = [];
let next = 0;
await Promise.all(
  Array.from({ length: registerConcurrency }, async () => {
    for (let i = next++; i < count; i = next++) {
      const reg = await register(`${prefix}-${i}`);
      agents.push(runAgent(reg.sessionToken, reg.heartbeatIntervalMs, i));
    }
  }),
);
process.stdout.write("registered\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
windowStart = performance.now() + warmupMs;
windowEnd = windowStart + durationMs;
setTimeout(() => (windowCpu = { at: performance.now(), usage: process.cpuUsage() }), warmupMs);
await Promise.all(agents);
// This process's CPU from the window's start to its last agent's end, in % of one core.
const used = windowCpu ? process.cpuUsage(windowCpu.usage) : undefined;
const windowCpuPercent =
  used && windowCpu ? ((used.user + used.system) / 1000 / (performance.now() - windowCpu.at)) * 100 : 0;
process.stdout.write(
  JSON.stringify({
    latencies,
    heartbeatFailures,
    errors,
    errorKinds: [...errorKinds],
    loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
    windowCpuPercent,
  }) + "\n",
);
