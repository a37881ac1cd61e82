import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { routes, type VcsDelivery } from "@drover/protocol";
import { callOk, startServerProc, type ServerProc } from "../support/fault-runs.js";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { lookUntil } from "../support/poll.js";
import { freePort } from "../support/processes.js";
import { deliver, githubPush } from "../support/webhooks.js";

// A server stopped or killed while it acts on a webhook delivery (its fetch of the commit held
// open) acts on it after it starts again: the delivery is not lost, neither as a fetch failure of
// the stop's making nor as a claim nobody renews.

const token = "ghp_TOKENrestart0123456789abcdefSECRET";
const admin = "drv_u_hook-restart.0123456789abcdefghij0123456789ab";
const sh = gitAs("Ada", "ada@example.com");
const servers: ServerProc[] = [];
const cleanups: Array<() => Promise<void>> = [];

after(async () => {
  for (const server of servers) await server.proc.stop("SIGKILL");
  for (const cleanup of cleanups) await cleanup();
});

/**
 * Delivers a push whose fetch the git server holds, ends the server with `signal` while it waits,
 * restarts it on the same data and returns the delivery once it reads processed.
 */
async function cutShort(signal: "SIGTERM" | "SIGKILL", extraEnv: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), "drover-hook-restart-"));
  mkdirSync(join(dir, "org"));
  // The first fetch waits at the git server until the test opens it; later ones pass.
  let arrived: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (arrived = resolve));
  let release: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (release = resolve));
  let fetches = 0;
  const git = await startGitHttpServer(dir, undefined, {
    basicAuth: { user: "x-access-token", password: token },
    beforeFetch: async () => {
      if (fetches++ > 0) return;
      arrived();
      await opened;
    },
  });
  cleanups.push(async () => {
    release();
    await git.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const env = {
    DROVER_DATA_DIR: join(dir, "server"),
    DROVER_PORT: String(await freePort()),
    DROVER_ADMIN_TOKEN: admin,
    DROVER_VCS_POLL_SECONDS: "0",
    ...extraEnv,
  };
  let server = await startServerProc(env);
  servers.push(server);
  const url = server.url;
  await callOk(url, routes.createPool, admin, { body: { name: "hooks" } });
  await callOk(url, routes.createWorkspace, admin, { body: { name: "infra", pool: "hooks" } });
  const created = await callOk(url, routes.createVcsConnection, admin, {
    body: { name: "gh", provider: "github", url: git.url, token },
  });
  await callOk(url, routes.linkWorkspaceVcs, admin, {
    params: { ws: "infra" },
    body: { connection: "gh", repository: "org/infra", branch: "main" },
  });
  const work = hostedRepository(sh, dir, "org/infra");
  const sha = commitAndPush(sh, work, "main", "Add v", { "main.tf": valueConfig("one") });
  const sent = await deliver(url, "gh", {
    provider: "github",
    event: "push",
    body: githubPush("org/infra", "main", "0".repeat(40), sha, [
      { id: sha, added: ["main.tf"], modified: [], removed: [] },
    ]),
    secret: created.webhookSecret as string,
  });
  assert.equal(sent.status, 202, JSON.stringify(sent.body));

  await held;
  await server.proc.stop(signal);
  const stopped = await server.proc.exited;
  if (signal === "SIGTERM") assert.equal(stopped.code, 0, server.proc.output());
  release();

  server = await startServerProc(env);
  servers.push(server);
  const delivery = await lookUntil("the delivery acted on after the restart", async () => {
    const listed = await callOk(server.url, routes.listVcsDeliveries, admin, { params: { connection: "gh" } });
    return (listed.items as VcsDelivery[]).find((d) => d.deliveryId === sent.deliveryId && d.status === "processed");
  });
  assert.equal(delivery.outcomes.length, 1, JSON.stringify(delivery));
  assert.equal(delivery.outcomes[0]?.outcome, "started", JSON.stringify(delivery));
  const runs = await callOk(server.url, routes.listRuns, admin, { query: { workspace: "infra" } });
  assert.equal(runs.items.length, 1);
  assert.equal(runs.items[0].source.commitSha, sha);
  return server;
}

test("a delivery cut short by a server stop is acted on at the next start", { timeout: 240_000 }, async () => {
  await cutShort("SIGTERM", {});
});

test("a delivery whose server was killed is taken up again once its claim lapses", { timeout: 240_000 }, async () => {
  const server = await cutShort("SIGKILL", { DROVER_LEASE_TTL_SECONDS: "1" });
  assert.match(server.proc.output(), /webhook deliveries whose server died while acting on them are taken up again/);
});
