import { execFileSync, spawn } from "node:child_process";
import { createHmac, randomBytes, randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { routes } from "@drover/protocol";
import { loadServerConfig, startServer, vcsReach, relayClient } from "@drover/server";
import { fetchCommitArchive, vcsClient, type GitAccess } from "@drover/vcs";
import { pino } from "pino";
import { inParallel } from "./dispatch.js";
import { gitServer, gitServerProcess } from "./git-host.js";
import { adminToken, api, droverBin, sleep, startServerProc, track } from "./harness.js";
import { percentile, type Figure } from "./report.js";

/*
 * VCS-driven runs against real parts: repositories served by `git http-backend` over smart HTTP,
 * webhook deliveries signed as GitHub signs them, sent to a real server, and a real
 * `drover agent vcs` relaying the server's VCS calls and fetches.
 */

const gitToken = "ghp_BENCHtoken0123456789abcdef";
const zero = "0".repeat(40);

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Bench", "-c", "user.email=bench@example.com", ...args], {
    cwd,
    encoding: "utf8",
    maxBuffer: 1 << 26,
  }).trim();

/**
 * A `git` first on a server's PATH that runs the real one and appends its start and end (ms, the
 * machine's clock) to `log`: the span of a delivery's git processes (init, fetch, log, archive)
 * is what "fetch excluded" takes out.
 */
function gitShim(dir: string): { path: string; log: string } {
  const real = execFileSync("sh", ["-c", "command -v git"], { encoding: "utf8" }).trim();
  const log = join(dir, "git-spans.log");
  writeFileSync(
    join(dir, "git"),
    `#!/bin/sh\ns=$(date +%s%3N)\n${real} "$@"\nrc=$?\necho "$s $(date +%s%3N)" >> ${log}\nexit $rc\n`,
    { mode: 0o755 },
  );
  writeFileSync(log, "");
  return { path: `${dir}:${process.env.PATH ?? ""}`, log };
}

/** The span from the first git process's start to the last one's end in the shim's log, then emptied. */
function gitSpan(log: string): number {
  const spans = readFileSync(log, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split(" ").map(Number) as [number, number]);
  writeFileSync(log, "");
  if (spans.length === 0) return 0;
  return Math.max(...spans.map((s) => s[1])) - Math.min(...spans.map((s) => s[0]));
}

/** A bare repository `<root>/<name>.git` and its work tree; returns the work tree. */
function repository(root: string, name: string): string {
  git(root, "init", "-q", "--bare", "-b", "main", `${name}.git`);
  const work = join(root, `work-${name.replace(/\//g, "-")}`);
  git(root, "init", "-q", "-b", "main", work);
  git(work, "remote", "add", "origin", join(root, `${name}.git`));
  return work;
}

/** Writes `files`, commits and pushes main; the new commit's sha. */
function commitPush(work: string, message: string, files: Record<string, string | Buffer>): string {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(work, path, ".."), { recursive: true });
    writeFileSync(join(work, path), content);
  }
  git(work, "add", "-A");
  git(work, "commit", "-q", "-m", message);
  git(work, "push", "-q", "origin", "main");
  return git(work, "rev-parse", "HEAD");
}

/** A GitHub push event with the fields a delivery's handling reads, changed files listed. */
function pushEvent(repository: string, before: string, after: string, modified: string[]) {
  const [owner, name] = repository.split("/");
  const commit = { id: after, message: "bench", added: [], removed: [], modified };
  return {
    ref: "refs/heads/main",
    before,
    after,
    created: before === zero,
    deleted: false,
    forced: false,
    commits: [commit],
    head_commit: commit,
    repository: { name, full_name: repository, owner: { login: owner, name: owner } },
  };
}

/** Sends a push delivery signed with `secret`; throws unless it is accepted. */
async function deliver(url: string, connection: string, secret: string, body: unknown): Promise<void> {
  const raw = Buffer.from(JSON.stringify(body));
  await api(url, routes.receiveVcsWebhook, {
    params: { connection },
    headers: {
      "content-type": "application/json",
      "x-github-event": "push",
      "x-github-delivery": randomUUID(),
      "x-hub-signature-256": `sha256=${createHmac("sha256", secret).update(raw).digest("hex")}`,
    },
    body: raw,
  });
}

interface Delivered {
  id: string;
  receivedAt: string;
  status: string;
  outcomes: Array<{ outcome: string; runId: string | null; detail: string | null }>;
}

/** The newest `limit` deliveries of `connection`, waiting until `count` of them are processed. */
async function processed(url: string, connection: string, count: number): Promise<Delivered[]> {
  for (let i = 0; ; i++) {
    const items = (
      await api(url, routes.listVcsDeliveries, { params: { connection }, query: { limit: Math.min(500, count) } })
    ).items as Delivered[];
    if (items.length >= count && items.every((d) => d.status === "processed")) return items;
    if (i > 6000) throw new Error(`deliveries of ${connection} not processed after 60 s`);
    await sleep(10);
  }
}

const runCreated = async (url: string, id: string) =>
  Date.parse(((await api(url, routes.getRun, { params: { id } })) as { createdAt: string }).createdAt);

async function connect(url: string, name: string, gitUrl: string): Promise<string> {
  const created = await api(url, routes.createVcsConnection, {
    body: { name, provider: "github", url: gitUrl, token: gitToken },
  });
  return (created as { webhookSecret: string }).webhookSecret;
}

/**
 * One push to a repository linked by `workspaces` workspaces (trigger paths all match) →
 * every run row queued, from the POST (bench clock) to the last run's createdAt (server clock,
 * the same machine's).
 */
async function fanOut(workspaces: number): Promise<{
  ms: number;
  fetchMs: number;
  firstMs: number;
  perWorkspaceMs: number;
  started: number;
}> {
  const root = mkdtempSync(join(tmpdir(), "drover-bench-vcs-fan-"));
  const gitd = await gitServer(root);
  const shim = gitShim(mkdtempSync(join(root, "shim-")));
  const server = await startServerProc({ DROVER_VCS_POLL_SECONDS: "0", PATH: shim.path });
  try {
    mkdirSync(join(root, "org"));
    const work = repository(root, "org/mono");
    const first = commitPush(work, "first", { "main.tf": "" });
    await api(server.url, routes.createPool, { body: { name: "runs" } });
    const secret = await connect(server.url, "gh", gitd.url);
    await inParallel(
      Array.from({ length: workspaces }, (_, i) => `fan${i}`),
      4,
      async (ws) => {
        await api(server.url, routes.createWorkspace, { body: { name: ws, pool: "runs" } });
        await api(server.url, routes.linkWorkspaceVcs, {
          params: { ws },
          body: { connection: "gh", repository: "org/mono", branch: "main", triggerPaths: ["**"] },
        });
      },
    );
    const second = commitPush(work, "second", { "main.tf": "# v2\n" });
    gitSpan(shim.log);
    const t0 = Date.now();
    await deliver(server.url, "gh", secret, pushEvent("org/mono", first, second, ["main.tf"]));
    const [d] = await processed(server.url, "gh", 1);
    const runs = d!.outcomes.filter((o) => o.outcome === "started").map((o) => o.runId!);
    if (runs.length !== workspaces)
      throw new Error(
        `${runs.length} of ${workspaces} workspaces started a run: ${JSON.stringify(d!.outcomes.slice(0, 3))}`,
      );
    const created = await inParallel(runs, 4, (id) => runCreated(server.url, id));
    const fetchMs = gitSpan(shim.log);
    const firstMs = Math.min(...created) - t0;
    const perWorkspaceMs = (Math.max(...created) - Math.min(...created)) / Math.max(1, runs.length - 1);
    return { ms: Math.max(...created) - t0, fetchMs, firstMs, perWorkspaceMs, started: runs.length };
  } finally {
    await server.stop();
    await gitd.close();
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * `deliveries` pushes, one after another, each to its own repository linked by one workspace:
 * per delivery, the delivery's receivedAt → its run's createdAt (both the server's), less the
 * span git's HTTP server spent answering that repository's fetch.
 */
async function perDelivery(deliveries: number): Promise<{ net: number[]; gross: number[]; fetch: number[] }> {
  const root = mkdtempSync(join(tmpdir(), "drover-bench-vcs-hook-"));
  const gitd = await gitServer(root);
  const shim = gitShim(mkdtempSync(join(root, "shim-")));
  const server = await startServerProc({ DROVER_VCS_POLL_SECONDS: "0", PATH: shim.path });
  try {
    mkdirSync(join(root, "org"));
    await api(server.url, routes.createPool, { body: { name: "runs" } });
    const secret = await connect(server.url, "gh", gitd.url);
    const repos: Array<{ name: string; work: string; first: string }> = [];
    for (let i = 0; i < deliveries; i++) {
      const name = `org/r${i}`;
      const work = repository(root, name);
      repos.push({ name, work, first: commitPush(work, "first", { "main.tf": "" }) });
      await api(server.url, routes.createWorkspace, { body: { name: `w${i}`, pool: "runs" } });
      await api(server.url, routes.linkWorkspaceVcs, {
        params: { ws: `w${i}` },
        body: { connection: "gh", repository: name, branch: "main", triggerPaths: ["*.tf"] },
      });
    }
    const net: number[] = [];
    const gross: number[] = [];
    const fetch: number[] = [];
    for (const [i, r] of repos.entries()) {
      const second = commitPush(r.work, "second", { "main.tf": `# ${i}\n` });
      gitSpan(shim.log);
      await deliver(server.url, "gh", secret, pushEvent(r.name, r.first, second, ["main.tf"]));
      const [d] = await processed(server.url, "gh", 1 + i).then((all) => all.slice(0, 1));
      const runId = d!.outcomes.find((o) => o.outcome === "started")?.runId;
      if (!runId) throw new Error(`delivery ${i} started no run: ${JSON.stringify(d!.outcomes)}`);
      const took = (await runCreated(server.url, runId)) - Date.parse(d!.receivedAt);
      const fetchMs = gitSpan(shim.log);
      gross.push(took);
      fetch.push(fetchMs);
      net.push(took - fetchMs);
    }
    return { net, gross, fetch };
  } finally {
    await server.stop();
    await gitd.close();
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * The relayed half: a server in this process (relayClient and vcsReach need its store), a VCS
 * pool and one real `drover agent vcs` holding the only credential; the git host, a process of its
 * own, listens on 127.0.0.2, an address the server's connection does not name.
 */
async function relayed(calls: number, repoMb: number) {
  const root = mkdtempSync(join(tmpdir(), "drover-bench-vcs-relay-"));
  const gitd = await gitServerProcess(root, "127.0.0.2");
  const dataDir = mkdtempSync(join(tmpdir(), "drover-bench-vcs-srv-"));
  const config = loadServerConfig({
    env: {
      DROVER_DATA_DIR: dataDir,
      DROVER_PORT: "0",
      DROVER_ADMIN_TOKEN: adminToken,
      DROVER_VCS_POLL_SECONDS: "0",
      DROVER_MAX_CONFIGURATION_MB: String(repoMb * 3),
      DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "false",
    },
  });
  const server = await startServer(config, { logger: pino({ level: "warn" }) });
  let agent: ReturnType<typeof spawn> | undefined;
  try {
    mkdirSync(join(root, "org"));
    const work = repository(root, "org/infra");
    const files: Record<string, Buffer> = { "main.tf": Buffer.from("") };
    // Incompressible content: neither git's pack nor the tar.gz can shrink it, the worst case.
    for (let i = 0; i < repoMb; i++) files[`data/blob${i}.bin`] = randomBytes(1024 * 1024);
    const sha = commitPush(work, "fifty megabytes", files);
    // Packed, as a VCS host keeps its repositories: a push of under 100 objects lands loose, and
    // serving loose objects compresses every blob again on the host's side, not Drover's.
    git(root, "--git-dir", join(root, "org/infra.git"), "repack", "-a", "-d", "-q");
    const pool = (await api(server.url, routes.createPool, { body: { name: "relay", kind: "vcs" } })) as { id: string };
    const { token } = await api(server.url, routes.createPoolToken, { params: { pool: "relay" }, body: {} });
    const connections = join(dataDir, "vcs-connections.json");
    writeFileSync(connections, JSON.stringify({ gh: { provider: "github", url: gitd.url, token: gitToken } }));
    const connection = (await api(server.url, routes.createVcsConnection, {
      body: { name: "gh", provider: "github", url: "https://ghe.internal.invalid", viaPool: "relay" },
    })) as { id: string };
    await api(server.url, routes.createPool, { body: { name: "runs" } });
    const ws = (await api(server.url, routes.createWorkspace, { body: { name: "big", pool: "runs" } })) as {
      id: string;
    };
    agent = track(
      spawn(process.execPath, [droverBin, "agent", "vcs"], {
        env: {
          ...process.env,
          DROVER_URL: server.url,
          DROVER_TOKEN: token as string,
          DROVER_AGENT_NAME: "bench-vcs",
          DROVER_AGENT_DATA_DIR: join(dataDir, "vcs-agent"),
          DROVER_AGENT_VCS_CONNECTIONS_FILE: connections,
          DROVER_AGENT_HEALTH_PORT: "0",
          DROVER_LOG_LEVEL: "warn",
        },
        stdio: ["ignore", "inherit", "inherit"],
      }),
    );
    const direct: GitAccess = { provider: "github", url: gitd.url, token: gitToken };
    const client = relayClient(server.store, { poolId: pool.id, connectionId: connection.id, deadlineMs: 30_000 });
    // The first relayed call also waits for the agent to register and take tasks: not counted.
    const exited = new Promise<never>((_, reject) =>
      agent!.once("exit", (code) => reject(new Error(`drover agent vcs exited (${code}) before its first task`))),
    );
    const warm = await Promise.race([
      client.run({ op: "branchHead", repository: "org/infra", branch: "main" }),
      exited,
    ]);
    if ((warm as { sha: string | null }).sha !== sha) throw new Error(`relayed branchHead: ${JSON.stringify(warm)}`);
    // An API call, as the metric says (branchHead is a git process, whose own spread of tens of ms
    // hid the relay's): a commit's details, answered by the git host.
    const commitOp = { op: "commit", repository: "org/infra", sha } as const;
    const straightClient = vcsClient({
      provider: "github",
      url: gitd.url,
      apiUrl: `${gitd.url}/api/v3`,
      auth: { kind: "token", token: gitToken },
    });
    for (let i = 0; i < 5; i++) {
      await client.run(commitOp);
      await straightClient.run(commitOp);
    }
    const viaAgent: number[] = [];
    const straight: number[] = [];
    for (let i = 0; i < calls; i++) {
      let t = performance.now();
      await client.run(commitOp);
      viaAgent.push(performance.now() - t);
      t = performance.now();
      await straightClient.run(commitOp);
      straight.push(performance.now() - t);
    }

    const reach = await vcsReach(server.store, connection.id, {
      agentTaskMs: 120_000,
      client: () => {
        throw new Error("the connection is reached through its pool");
      },
    });
    const wanted = {
      repository: "org/infra",
      branch: "main",
      sha,
      workspaceId: ws.id,
      since: null,
      triggerPaths: [],
      workingDirectory: "",
      limits: config.archiveLimits,
    };
    let t = Date.now();
    const fetched = await reach.fetch(wanted);
    const relayMs = Date.now() - t;
    if (!fetched) throw new Error("the relayed fetch was not wanted");
    t = Date.now();
    const local = await fetchCommitArchive({ access: direct, repository: "org/infra", sha, maxBytes: 1 << 30 });
    const localMs = Date.now() - t;
    return { viaAgent, straight, relayMs, localMs, archiveMb: (local?.archive.length ?? 0) / 1024 / 1024 };
  } finally {
    if (agent && agent.exitCode === null) {
      const exited = new Promise((r) => agent!.once("exit", r));
      agent.kill("SIGTERM");
      await exited;
    }
    await server.close();
    await gitd.close();
    rmSync(root, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export const vcsBench = (name: string) => `vcs (${name})`;

export async function benchVcs(fanWorkspaces = 100, deliveries = 50, calls = 500, repoMb = 50): Promise<Figure[]> {
  const fan = await fanOut(fanWorkspaces);
  process.stderr.write(`vcs: fan-out ${JSON.stringify(fan)}\n`);
  const hooks = await perDelivery(deliveries);
  process.stderr.write(`vcs: per delivery, fetch excluded p99 ${percentile(hooks.net, 99)} ms\n`);
  const relay = await relayed(calls, repoMb);
  const overhead = relay.viaAgent.map((v, i) => v - relay.straight[i]!);
  const hookP99 = percentile(hooks.net, 99);
  const relayP99 = percentile(overhead, 99);
  const mbps = repoMb / (relay.relayMs / 1000);
  return [
    {
      bench: vcsBench(`one push, ${fanWorkspaces} linked workspaces`),
      metric: "webhook POST → last run queued",
      unit: "ms",
      value: fan.ms,
      baseline: null,
      baselineLabel: "",
      target: "≤ 1000 ms",
      met: fan.ms <= 1000,
      note: `${fan.started} runs started by one delivery (trigger paths ** match all); from the bench's POST to the newest run's createdAt (server clock, same machine); includes the delivery's git work (depth-1 fetch and packing, first git process start → last one's end) of ${fan.fetchMs} ms; the first run queued ${fan.firstMs} ms after the POST, then one every ${fan.perWorkspaceMs.toFixed(1)} ms (each workspace's commit claimed, archive checked and stored as its own configuration version, run created, older queued runs superseded, one after another)`,
    },
    {
      bench: vcsBench(`${deliveries} push deliveries, one workspace each`),
      metric: "webhook → run queued p99, fetch excluded",
      unit: "ms",
      value: hookP99,
      baseline: percentile(hooks.gross, 99),
      baselineLabel: "the same p99 with the fetch in",
      target: "≤ 100 ms",
      met: hookP99 <= 100,
      note: `per delivery: its receivedAt → its run's createdAt (both the server's rows), less the span of the server's git processes for it (a PATH shim logs each one's start and end: init, depth-1 fetch, log, archive; first start → last end; p50 ${percentile(hooks.fetch, 50).toFixed(0)} ms, p99 ${percentile(hooks.fetch, 99).toFixed(0)} ms); the archive check, storing and run creation stay in; sent one after another, each processed before the next; p50 ${percentile(hooks.net, 50).toFixed(0)} ms`,
    },
    {
      bench: vcsBench(`relay, ${calls} commit API calls`),
      metric: "relay overhead per VCS API call p99",
      unit: "ms",
      value: relayP99,
      baseline: percentile(relay.straight, 99),
      baselineLabel: "the call straight from the client, p99",
      target: "≤ 10 ms",
      met: relayP99 <= 10,
      note: `per call: relayClient (server in the bench's process) + one real \`drover agent vcs\` minus the same call (GET a commit, octokit, answered by the git host, a process of its own) from the bench directly, alternating; relayed p50 ${percentile(relay.viaAgent, 50).toFixed(1)} ms, p99 ${percentile(relay.viaAgent, 99).toFixed(1)} ms; overhead p50 ${percentile(overhead, 50).toFixed(1)} ms`,
    },
    {
      bench: vcsBench(`${repoMb} MB repository through a VCS agent`),
      metric: "fetched, packed and stored",
      unit: "MB/s",
      value: mbps,
      baseline: repoMb / (relay.localMs / 1000),
      baselineLabel: "fetch + pack in the bench, no agent, no upload",
      target: "≥ 50 MB/s",
      met: mbps >= 50,
      note: `${repoMb} files of 1 MB random bytes (incompressible) in one commit; vcsReach(…).fetch: task queued → agent fetches at depth 1 and packs (${relay.archiveMb.toFixed(1)} MB tar.gz) → uploads → server checks and stores the configuration version, ${relay.relayMs} ms; git over loopback (127.0.0.2), git's HTTP server in a process of its own`,
    },
  ];
}
