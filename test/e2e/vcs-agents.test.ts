import assert from "node:assert/strict";
import { createHmac, generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes, type RunSource } from "@drover/protocol";
import { store } from "@drover/server";
import { pino } from "pino";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { githubPullRequest } from "../support/webhooks.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { startOtlpReceiver } from "../support/otlp-receiver.js";
import { lookUntil } from "../support/poll.js";
import { freePort, spawnDrover, type Proc } from "../support/processes.js";
import { startStack, type Stack } from "../support/stack.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { linkArgs, viaPoolConnectArgs } from "../support/vcs-cli.js";

/*
 * VCS agents end to end: real `drover agent vcs` processes relay a git server the Drover server
 * is never given an address of (it listens on 127.0.0.2; the server's connection names another
 * host and holds no token). Commits found by the poller are fetched and packed by a VCS agent,
 * uploaded, and applied by a real run agent; a VCS agent killed mid-fetch is replaced by another
 * of its pool; anything outside the closed operations is refused; the token shows nowhere.
 */

const token = "ghp_RELAYtoken0123456789abcdefSECRET";
const basic = Buffer.from(`x-access-token:${token}`).toString("base64");
const hookSecret = "whsec-relay-0123456789abcdef";
const appKeys = generateKeyPairSync("rsa", { modulusLength: 2048 });
const appPrivateKey = appKeys.privateKey.export({ type: "pkcs1", format: "pem" }).toString();
const logLines: string[] = [];
const sh = gitAs("Ada", "ada@example.com");
let stack: Stack;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let api: GithubApi;
let root: string;
let work: string;
let relayToken: string;
let connectionsFile: string;
const vcsAgents = new Map<string, Proc>();

/** Fetches wait while the gate is closed; `waiting` resolves when one arrives at it. */
let gate = { closed: false, open: () => {}, opened: Promise.resolve(), waiting: () => {} };
let fetchWaiting: Promise<void> = Promise.resolve();
function closeGate(): void {
  let open = () => {};
  const opened = new Promise<void>((r) => (open = r));
  let waiting = () => {};
  fetchWaiting = new Promise<void>((r) => (waiting = r));
  gate = { closed: true, open, opened, waiting };
}

/** Commits and pushes to `branch`; the API stand-in then knows the commit, as GitHub would. */
function commit(message: string, files: Record<string, string | null>, branch = "main"): string {
  const sha = commitAndPush(sh, work, branch, message, files);
  api.repos.get("org/infra")!.commits[sha] = { message, author: { name: "Ada", email: "ada@example.com" } };
  return sha;
}

const tf = valueConfig;

const waitFor = <T>(what: string, look: () => Promise<T | undefined>, timeoutMs?: number) =>
  lookUntil(what, look, {
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    diagnose: () => `${logLines.slice(-40).join("")}\n${[...vcsAgents.values()].map((p) => p.output()).join("\n")}`,
  });

const runsOf = async (ws: string) =>
  (await stack.server.api(routes.listRuns, { query: { workspace: ws } })).body.items as {
    id: string;
    status: string;
    source: RunSource | null;
  }[];

/** A VCS agent's data dir: an agent started `<name>-again` takes over the one of `<name>`. */
const vcsDataDir = (name: string) => join(stack.dir, "vcs-data", name.replace(/-again$/, ""));

async function startVcsAgent(name: string, env: Record<string, string> = {}): Promise<Proc> {
  const proc = spawnDrover(["agent", "vcs"], {
    ...stack.baseEnv,
    DROVER_TOKEN: relayToken,
    DROVER_AGENT_NAME: name,
    DROVER_AGENT_DATA_DIR: vcsDataDir(name),
    DROVER_AGENT_VCS_CONNECTIONS_FILE: connectionsFile,
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "json",
    ...env,
  });
  vcsAgents.set(name, proc);
  await waitFor(`VCS agent ${name} to register`, async () => {
    if (proc.child.exitCode !== null) throw new Error(`VCS agent ${name} exited:\n${proc.output()}`);
    const listed = await stack.server.api(routes.listAgents, { query: { pool: "relay" } });
    return listed.body.items.some((a: { name: string; status: string }) => a.name === name && a.status !== "offline")
      ? true
      : undefined;
  });
  return proc;
}

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-vcs-relay-"));
  mkdirSync(join(root, "org"));
  work = hostedRepository(sh, root, "org/infra");
  // GitHub Enterprise Server's shape: its REST API under /api/v3 on the host that serves git.
  api = await startGithubApi({
    token,
    // A GitHub App too, whose key only one VCS agent holds (the last tests).
    app: {
      appId: "777",
      installationId: 4242,
      publicKey: appKeys.publicKey.export({ type: "spki", format: "pem" }).toString(),
    },
    prefix: "/api/v3",
  });
  api.addRepo("org/infra");
  git = await startGitHttpServer(root, undefined, {
    api: { prefix: "/api/v3", target: api.url },
    basicAuth: { user: "x-access-token", password: (given) => given === token || api.minted.has(given) },
    host: "127.0.0.2",
    beforeFetch: async () => {
      if (!gate.closed) return;
      gate.waiting();
      await gate.opened;
    },
  });
  // A lease short enough that the take-over test waits little, long enough that a busy machine's
  // late heartbeat does not make the run agent "lost" (3 s did, with the suite beside it).
  stack = await startStack(
    { DROVER_VCS_POLL_SECONDS: "1", DROVER_LEASE_TTL_SECONDS: "10", DROVER_MAX_CONFIGURATION_MB: "1" },
    { logger: pino({ level: "debug" }, { write: (line: string) => void logLines.push(line) }) },
  );
  await stack.startAgent("runner");
  const created = await stack.cli(["pool", "create", "relay", "--kind", "vcs", "--json"]);
  assert.equal(created.code, 0, created.stderr);
  assert.equal(JSON.parse(created.stdout).kind, "vcs");
  relayToken = (
    await stack.server.api(routes.createPoolToken, { params: { pool: "relay" }, body: { description: "relay" } })
  ).body.token;
  connectionsFile = join(stack.dir, "vcs-connections.json");
  writeFileSync(
    connectionsFile,
    JSON.stringify({ gh: { provider: "github", url: git.url, token, webhookSecret: hookSecret } }),
  );
  await startVcsAgent("relay-1");
  await startVcsAgent("relay-2");
});
after(async () => {
  await Promise.all([...vcsAgents.values()].map((p) => p.stop("SIGKILL")));
  await stack?.stop();
  await git?.close();
  await api?.close();
  rmSync(root, { recursive: true, force: true });
});

test("a commit is fetched through a VCS agent the server cannot do without, and applied by a run agent", async () => {
  const connected = await stack.cli([...viaPoolConnectArgs("gh", "https://ghe.internal.invalid", "relay"), "--json"]);
  assert.equal(connected.code, 0, connected.stderr);
  const connection = JSON.parse(connected.stdout);
  assert.equal(connection.viaPool, "relay");
  assert.deepEqual(
    (await store.vcsEndpoint(stack.server.store, connection.id)).auth,
    { kind: "token", token: "" },
    "the server holds no token",
  );
  const shown = await stack.cli(["pool", "show", "relay"]);
  assert.match(shown.stdout, /relay\s+vcs\s+pool-/);
  assert.match((await stack.cli(["pool", "list"])).stdout, /relay\s+2\/2\s+pool-\S+\s+vcs/);

  await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool, autoApply: true } });
  // A workspace never goes to a vcs pool.
  const refused = await stack.server.api(routes.createWorkspace, { body: { name: "nope", pool: "relay" } });
  assert.equal(refused.status, 403);
  const first = commit("Add v", { "main.tf": tf("one") });
  const linked = await stack.cli([...linkArgs("infra", "gh", "org/infra", "main"), "--json"]);
  assert.equal(linked.code, 0, linked.stderr);
  // The server cannot know where the agents listen: the link says what to register there, at once.
  const webhook = JSON.parse(linked.stdout).webhook;
  assert.equal(webhook.registered, false);
  assert.match(webhook.url, /\/hooks\/gh$/);
  assert.match(webhook.reason, /VCS agent pool relay/);
  const run = await waitFor("the first commit's run", async () => (await runsOf("infra"))[0]);
  assert.deepEqual(run.source, {
    repository: "org/infra",
    branch: "main",
    commitSha: first,
    message: "Add v",
    author: "Ada <ada@example.com>",
    pullRequest: null,
  });
  assert.equal((await stack.waitForRun(run.id, ["applied"])).status, "applied");
  assert.ok(git.requests.length > 0, "the VCS agents reached git");
  // The run's commit status went out through the VCS agents too: only they know the VCS's address.
  await waitFor("the commit status of the applied run", async () =>
    api.repos.get("org/infra")!.statuses.find((st) => st.sha === first && st.state === "success"),
  );
  assert.deepEqual(api.invalid, [], "every answer matched GitHub's published description");
  assert.deepEqual(git.refused, [], "every git request carried the token");
  const outputs = await stack.server.api(routes.workspaceOutputs, { params: { ws: "infra" } });
  assert.equal(outputs.body.items[0].value, "one");
});

test("a VCS agent killed mid-fetch: another agent of the pool takes the task after its lease and finishes", async () => {
  closeGate();
  const second = commit("Change v", { "main.tf": tf("two") });
  await fetchWaiting;
  const held = await waitFor("the leased fetch task", async () => {
    const rows = await stack.server.store.db.selectFrom("vcs_tasks").selectAll().where("kind", "=", "fetch").execute();
    // Nothing a task row keeps carries the token.
    assert.ok(!JSON.stringify(rows).includes(token), JSON.stringify(rows));
    return rows.find((r) => r.status === "leased");
  });
  const agents = await stack.server.api(routes.listAgents, { query: { pool: "relay" } });
  const holder = agents.body.items.find((a: { id: string }) => a.id === held.agent_id)?.name as string;
  const survivor = holder === "relay-1" ? "relay-2" : "relay-1";
  // The holder's fetch is under way in its data dir, held at the git server's gate.
  const holderWork = join(vcsDataDir(holder), "vcs-work");
  assert.ok(
    readdirSync(holderWork).some((n) => n.startsWith("drover-vcs-")),
    "the fetch's directory",
  );
  await vcsAgents.get(holder)!.stop("SIGKILL");
  gate.closed = false;
  gate.open();
  const run = await waitFor("the second commit's run", async () => {
    const runs = await runsOf("infra");
    return runs[0]?.source?.commitSha === second ? runs[0] : undefined;
  });
  assert.equal((await stack.waitForRun(run.id, ["applied"])).status, "applied");
  assert.match(
    vcsAgents.get(survivor)!.output(),
    new RegExp(`"task":"${held.id}","attempt":${held.attempt + 1}.*"kind":"fetch"`),
  );
  // What the killed agent left in its data dir is removed by the next agent started on it.
  assert.ok(readdirSync(holderWork).length > 0, "the killed agent's fetch directory is still there");
  const again = await startVcsAgent(`${holder}-again`);
  assert.deepEqual(readdirSync(holderWork), []);
  assert.match(again.output(), /removed the fetch directories an earlier VCS agent left/);
});

test("an archive over the server's limit is refused with a clear error on the link, and starts no run", async () => {
  const before = (await runsOf("infra")).length;
  const big = commit("Too big", { "blob.txt": randomBytes(1_600_000).toString("base64") });
  const error = await waitFor("the refusal", async () => {
    const link = await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "infra" } });
    return (link.body.lastError as string | null) ?? undefined;
  });
  assert.match(error, new RegExp(`the archive of org/infra at ${big.slice(0, 12)} is larger than 1 MB`));
  assert.equal((await runsOf("infra")).length, before);
});

test("tasks outside the closed operations are refused by the agent, and never reach the VCS", async () => {
  const db = stack.server.store.db;
  const pool = await store.getPool(stack.server.store, "relay");
  const connection = await store.getVcsConnection(stack.server.store, "gh");
  const requests = git.requests.length;
  const bad = [
    { op: "proxy", url: "https://evil.example/steal" },
    { op: "branchHead", repository: "org/../../etc", branch: "main" },
    { op: "branchHead", repository: "https://evil.example/o/r", branch: "main" },
    { op: "branchHead", repository: "org/infra", branch: "--upload-pack=touch /tmp/pwned" },
  ];
  // The server's own queue refuses them.
  for (const operation of bad)
    await assert.rejects(
      store.enqueueVcsTask(stack.server.store, {
        poolId: pool.id,
        connectionId: connection.id,
        task: { kind: "operation", operation },
        deadlineMs: 60_000,
      }),
      /not a valid VCS operation/,
    );
  // Written past the queue's check, as a compromised server could: the agent refuses them itself.
  const ids = bad.map((_, i) => `vtask-forged${i}`);
  for (const [i, operation] of bad.entries())
    await db
      .insertInto("vcs_tasks")
      .values({
        id: ids[i]!,
        pool_id: pool.id,
        connection_id: connection.id,
        kind: "operation",
        payload: JSON.stringify(operation),
        workspace_id: null,
        status: "queued",
        agent_id: null,
        lease_expires_at: null,
        deadline_at: Date.now() + 120_000,
        result: null,
        error: null,
        configuration_version_id: null,
        created_at: Date.now(),
        finished_at: null,
      })
      .execute();
  stack.server.store.events.publish("job-queued", pool.id);
  const ended = await waitFor("the agents' refusals", async () => {
    const rows = await db.selectFrom("vcs_tasks").selectAll().where("id", "in", ids).execute();
    return rows.every((r) => r.status === "failed") ? rows : undefined;
  });
  for (const row of ended) assert.match(row.error ?? "", /refused: not one of the VCS operations/, row.error ?? "");
  assert.ok(
    git.requests.slice(requests).every((p) => p.startsWith("/org/infra.git/")),
    git.requests.slice(requests).join(", "),
  );
});

test("the webhook listener forwards verified deliveries once and refuses the rest", async () => {
  const port = await freePort();
  const hooks = await startVcsAgent("hooks", {
    DROVER_AGENT_VCS_WEBHOOK_PORT: String(port),
    DROVER_AGENT_VCS_WEBHOOK_ADDRESS: "127.0.0.1",
  });
  await hooks.waitFor(/webhook listener ready/);
  const body = JSON.stringify({ ref: "refs/heads/main", after: "b".repeat(40) });
  const post = (path: string, headers: Record<string, string>) =>
    // eslint-disable-next-line no-restricted-globals -- the VCS agent's webhook listener, not the Drover server
    fetch(`http://127.0.0.1:${port}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body,
    });
  const signed = { "x-github-event": "push", "x-github-delivery": "delivery-1" };
  const signature = `sha256=${createHmac("sha256", hookSecret).update(body).digest("hex")}`;
  assert.equal((await post("/hooks/gh", signed)).status, 401, "no signature");
  assert.equal((await post("/hooks/gh", { ...signed, "x-hub-signature-256": `sha256=${"0".repeat(64)}` })).status, 401);
  const unknown = await post("/hooks/other", { ...signed, "x-hub-signature-256": signature });
  assert.equal(unknown.status, 404);
  assert.equal((await unknown.text()).trim(), "not found");
  const connection = await store.getVcsConnection(stack.server.store, "gh");
  assert.deepEqual(await store.listVcsDeliveries(stack.server.store, connection.id), []);
  assert.equal((await post("/hooks/gh", { ...signed, "x-hub-signature-256": signature })).status, 202);
  assert.equal((await post("/hooks/gh", { ...signed, "x-hub-signature-256": signature })).status, 202);
  // Both forwarded from the agent's spool; stored once, as the server's own webhook route stores deliveries.
  await waitFor("the agent's spool to empty", async () =>
    readdirSync(join(vcsDataDir("hooks"), "vcs-deliveries")).length === 0 ? true : undefined,
  );
  const kept = await store.listVcsDeliveries(stack.server.store, connection.id);
  assert.deepEqual(
    kept.map((d) => [d.deliveryId, d.event]),
    [["delivery-1", "push"]],
  );
});

test("deliveries a VCS agent takes while the server is unreachable are kept on disk and forwarded after a restart", async () => {
  const proxy = await startTcpProxy(stack.server.url);
  try {
    const body = JSON.stringify({ zen: "Keep it logically awesome.", hook_id: 1 });
    const deliverTo = (port: number) =>
      // eslint-disable-next-line no-restricted-globals -- the VCS agent's webhook listener, not the Drover server
      fetch(`http://127.0.0.1:${port}/hooks/gh`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-github-event": "ping",
          "x-github-delivery": "delivery-kept",
          "x-hub-signature-256": `sha256=${createHmac("sha256", hookSecret).update(body).digest("hex")}`,
        },
        body,
      });
    const port = await freePort();
    const first = await startVcsAgent("spooler", {
      DROVER_URL: proxy.url,
      DROVER_AGENT_VCS_WEBHOOK_PORT: String(port),
      DROVER_AGENT_VCS_WEBHOOK_ADDRESS: "127.0.0.1",
    });
    await first.waitFor(/webhook listener ready/);
    proxy.set("refuse");
    assert.equal((await deliverTo(port)).status, 202, "taken while the server cannot be reached");
    await first.waitFor(/forwarding a webhook delivery failed; kept/);
    const connection = await store.getVcsConnection(stack.server.store, "gh");
    const stored = async () =>
      (await store.listVcsDeliveries(stack.server.store, connection.id)).find((d) => d.deliveryId === "delivery-kept");
    assert.equal(await stored(), undefined);
    await first.stop("SIGTERM");
    assert.equal(readdirSync(join(vcsDataDir("spooler"), "vcs-deliveries")).length, 1, "kept on disk");

    // The server reachable again, and another agent process on the same data dir: forwarded,
    // though this one runs no listener of its own.
    proxy.set("open");
    const again = await startVcsAgent("spooler-again", { DROVER_URL: proxy.url });
    const delivery = await waitFor("the kept delivery at the server", stored);
    assert.equal(delivery.event, "ping");
    await waitFor("the spool to empty", async () =>
      readdirSync(join(vcsDataDir("spooler"), "vcs-deliveries")).length === 0 ? true : undefined,
    );
    await again.stop("SIGTERM");
  } finally {
    await proxy.close();
  }
});

test("a pull request delivered to a VCS agent's listener plans at once, fetched through the agents", async () => {
  const port = await freePort();
  const hooks = await startVcsAgent("pr-hooks", {
    DROVER_AGENT_VCS_WEBHOOK_PORT: String(port),
    DROVER_AGENT_VCS_WEBHOOK_ADDRESS: "127.0.0.1",
  });
  await hooks.waitFor(/webhook listener ready/);
  const base = sh(work, "rev-parse", "main");
  sh(work, "checkout", "-q", "-b", "feature");
  // The poller watches main only: a plan of this commit can come from the delivery alone.
  // Without the oversized file an earlier test left on main.
  const head = commit("Try a change", { "main.tf": tf("proposed"), "blob.txt": null }, "feature");
  sh(work, "checkout", "-q", "main");
  const url = "https://ghe.internal.invalid/org/infra/pull/3";
  const body = JSON.stringify(
    githubPullRequest("opened", "org/infra", {
      number: 3,
      base: "main",
      baseSha: base,
      head: "feature",
      headSha: head,
      url,
    }),
  );
  // eslint-disable-next-line no-restricted-globals -- the VCS agent's webhook listener, not the Drover server
  const answer = await fetch(`http://127.0.0.1:${port}/hooks/gh`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-github-event": "pull_request",
      "x-github-delivery": "delivery-pr-3",
      "x-hub-signature-256": `sha256=${createHmac("sha256", hookSecret).update(body).digest("hex")}`,
    },
    body,
  });
  assert.equal(answer.status, 202);
  const plan = await waitFor("the pull request's plan", async () =>
    (await runsOf("infra")).find((r) => r.source?.pullRequest?.number === 3),
  );
  assert.deepEqual(plan.source, {
    repository: "org/infra",
    branch: "feature",
    commitSha: head,
    message: "Try a change",
    author: "Ada <ada@example.com>",
    pullRequest: { number: 3, url },
  });
  const done = await stack.waitForRun(plan.id, ["planned_and_finished", "errored"]);
  assert.equal(done.status, "planned_and_finished");
  const connection = await store.getVcsConnection(stack.server.store, "gh");
  const delivery = (await store.listVcsDeliveries(stack.server.store, connection.id)).find(
    (d) => d.deliveryId === "delivery-pr-3",
  );
  assert.deepEqual(
    delivery?.outcomes.map((o) => [o.workspace, o.outcome, o.runId]),
    [["infra", "started", plan.id]],
  );
  assert.ok(
    [...vcsAgents.values()].some((p) => new RegExp(`"kind":"fetch".*"sha":"${head}"`).test(p.output())),
    "the pull request's head was fetched by a VCS agent",
  );
  // Reported back through the agents: the plan's status on the head, one comment on the pull request.
  const repo = api.repos.get("org/infra")!;
  await waitFor("the plan's status and comment", async () =>
    repo.statuses.some((st) => st.sha === head && st.state === "success") &&
    [...repo.comments.values()].some((c) => c.issue === 3)
      ? true
      : undefined,
  );
  const comments = [...repo.comments.values()].filter((c) => c.issue === 3);
  assert.equal(comments.length, 1);
  assert.match(comments[0]!.body, /infra/);
});

test("a VCS agent exports to DROVER_AGENT_OTLP_ENDPOINT the metrics its /metrics serves", async () => {
  const receiver = await startOtlpReceiver();
  const healthPort = await freePort();
  const agent = await startVcsAgent("otlp", {
    DROVER_AGENT_OTLP_ENDPOINT: receiver.url,
    OTEL_METRIC_EXPORT_INTERVAL: "200",
    DROVER_AGENT_HEALTH_PORT: String(healthPort),
    DROVER_AGENT_HEALTH_ADDRESS: "127.0.0.1",
  });
  try {
    const exported = await waitFor("the VCS agent's metrics at the receiver", async () =>
      receiver.metrics.find(
        (m) => m.resource["service.name"] === "drover-vcs-agent" && m.name === "drover_vcs_agent_running_tasks",
      ),
    );
    assert.equal(exported.resource["drover.pool"], "relay");
    assert.equal(exported.resource["drover.agent"], "otlp");
    // eslint-disable-next-line no-restricted-globals -- the VCS agent's health port, not the Drover server
    const served = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
    assert.match(served, /^drover_vcs_agent_running_tasks \d+$/m);
    assert.match(served, /^# TYPE drover_vcs_agent_tasks_total counter$/m);
  } finally {
    await agent.stop("SIGTERM");
    await receiver.close();
  }
});

test("a pool token of the other kind stops an agent with a clear error", async () => {
  const runAgent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    DROVER_TOKEN: relayToken,
    DROVER_AGENT_NAME: "misplaced",
    DROVER_AGENT_DATA_DIR: join(stack.dir, "misplaced"),
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  assert.equal((await runAgent.exited).code, 2, runAgent.output());
  assert.match(
    runAgent.output(),
    /is for another kind of pool.*relay is a vcs pool: taking run jobs needs a runs pool/,
  );
  const vcsAgent = spawnDrover(["agent", "vcs"], {
    ...stack.baseEnv,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "misplaced-vcs",
    DROVER_AGENT_DATA_DIR: vcsDataDir("misplaced-vcs"),
    DROVER_AGENT_VCS_CONNECTIONS_FILE: connectionsFile,
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  assert.equal((await vcsAgent.exited).code, 2, vcsAgent.output());
  assert.match(vcsAgent.output(), /e2e is a runs pool: taking VCS tasks needs a vcs pool/);
});

test("a VCS agent whose data dir cannot be used stops at once, naming the folder and the setting", async () => {
  const file = join(stack.dir, "not-a-dir");
  writeFileSync(file, "");
  const vcsAgent = spawnDrover(["agent", "vcs"], {
    ...stack.baseEnv,
    DROVER_TOKEN: relayToken,
    DROVER_AGENT_NAME: "no-data-dir",
    DROVER_AGENT_DATA_DIR: join(file, "data"),
    DROVER_AGENT_VCS_CONNECTIONS_FILE: connectionsFile,
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  assert.equal((await vcsAgent.exited).code, 2, vcsAgent.output());
  assert.match(vcsAgent.output(), /fetches in .*not-a-dir\/data\/vcs-work, which it cannot use: ENOTDIR/);
  assert.match(vcsAgent.output(), /DROVER_AGENT_DATA_DIR/);
});

test("a GitHub App whose key only a VCS agent holds: it mints installation tokens to fetch and to report", async () => {
  const created = await stack.cli(["pool", "create", "relay-app", "--kind", "vcs", "--json"]);
  assert.equal(created.code, 0, created.stderr);
  const appToken = (
    await stack.server.api(routes.createPoolToken, { params: { pool: "relay-app" }, body: { description: "app" } })
  ).body.token as string;
  mkdirSync(join(stack.dir, "app"));
  writeFileSync(join(stack.dir, "app", "key.pem"), appPrivateKey);
  const appConnections = join(stack.dir, "app", "connections.json");
  writeFileSync(
    appConnections,
    JSON.stringify({
      "gh-app": {
        provider: "github",
        url: git.url,
        githubApp: { appId: "777", installationId: 4242, privateKeyFile: "key.pem" },
      },
    }),
  );
  const connected = await stack.cli([
    "vcs",
    "connect",
    "gh-app",
    "--provider",
    "github",
    "--vcs-url",
    "https://ghe.internal.invalid",
    "--via-pool",
    "relay-app",
  ]);
  assert.equal(connected.code, 0, connected.stderr);
  const mintedBefore = api.minted.size;
  const agent = spawnDrover(["agent", "vcs"], {
    ...stack.baseEnv,
    DROVER_TOKEN: appToken,
    DROVER_AGENT_NAME: "relay-app-1",
    DROVER_AGENT_DATA_DIR: vcsDataDir("relay-app-1"),
    DROVER_AGENT_VCS_CONNECTIONS_FILE: appConnections,
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "json",
  });
  vcsAgents.set("relay-app-1", agent);
  await agent.waitFor(/"msg":"VCS agent registered"/, 60_000);

  await stack.server.api(routes.createWorkspace, { body: { name: "infra-app", pool: stack.pool, autoApply: true } });
  // A branch of its own, without the oversized file an earlier test left on main.
  sh(work, "checkout", "-q", "-b", "app", "main");
  const head = commit("As the app", { "main.tf": tf("app"), "blob.txt": null }, "app");
  sh(work, "checkout", "-q", "main");
  const linked = await stack.cli(linkArgs("infra-app", "gh-app", "org/infra", "app"));
  assert.equal(linked.code, 0, linked.stderr);
  const run = await waitFor("the run of main's head through the app's agent", async () =>
    (await runsOf("infra-app")).find((r) => r.source?.commitSha === head),
  );
  assert.equal((await stack.waitForRun(run.id, ["applied", "errored"])).status, "applied");
  assert.match(agent.output(), new RegExp(`"kind":"fetch".*"sha":"${head}"`), "the app's agent fetched the commit");
  const status = await waitFor("the applied run's status, sent as the app", async () =>
    api.calls.find(
      (c) =>
        c.method === "POST" &&
        c.path === `/api/v3/repos/org/infra/statuses/${head}` &&
        JSON.stringify(c.body).includes("infra-app") &&
        JSON.stringify(c.body).includes('"success"'),
    ),
  );
  const minted = [...api.minted].slice(mintedBefore);
  assert.equal(minted.length, 1, "one installation token, kept for every task of the hour");
  assert.equal(status.headers.authorization, `token ${minted[0]}`);
  assert.ok(
    api.calls.some((c) => c.method === "POST" && c.path === "/api/v3/app/installations/4242/access_tokens"),
    "the token was minted from the app's key",
  );
  assert.deepEqual(git.refused, [], "git accepted the minted token");
  for (const secret of [appPrivateKey.split("\n")[1]!, minted[0]!])
    assert.ok(!agent.output().includes(secret), "the agent's output holds the app's key or token");
});

test("the token is in no log line, answer, task row or agent output", async () => {
  const answers = JSON.stringify([
    (await stack.server.api(routes.listVcsConnections, {})).body,
    (await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "infra" } })).body,
    await runsOf("infra"),
    await stack.server.store.db.selectFrom("vcs_tasks").selectAll().execute(),
  ]);
  const outputs = [...vcsAgents.values()].map((p) => p.output()).join("\n");
  for (const secret of [token, basic, hookSecret, appPrivateKey.split("\n")[1]!, ...api.minted]) {
    assert.ok(!answers.includes(secret), `an answer or task row holds ${secret}`);
    assert.ok(!logLines.join("").includes(secret), `the server log holds ${secret}`);
    assert.ok(!outputs.includes(secret), `a VCS agent's output holds ${secret}`);
  }
});
