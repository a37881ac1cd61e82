import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes, type VcsDelivery } from "@drover/protocol";
import { callOk, startServerProc, type ServerProc } from "../support/fault-runs.js";
import { commitAndPush, gitAs, valueConfig } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { lookUntil } from "../support/poll.js";
import { freePort } from "../support/processes.js";
import { deliver, githubPush } from "../support/webhooks.js";

// A server stopped while it acts on a webhook delivery (its fetch of the commit held open) acts
// on it at its next start: the delivery is not lost as a fetch failure of the stop's making.

const token = "ghp_TOKENrestart0123456789abcdefSECRET";
const admin = "drv_u_hook-restart.0123456789abcdefghij0123456789ab";
const sh = gitAs("Ada", "ada@example.com");
let dir: string;
let server: ServerProc | undefined;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
// The first fetch waits at the git server until the test opens it; later ones pass.
let arrived: () => void = () => undefined;
const held = new Promise<void>((resolve) => (arrived = resolve));
let release: () => void = () => undefined;
const opened = new Promise<void>((resolve) => (release = resolve));
let fetches = 0;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "drover-hook-restart-"));
  mkdirSync(join(dir, "org"));
  git = await startGitHttpServer(dir, undefined, {
    basicAuth: { user: "x-access-token", password: token },
    beforeFetch: async () => {
      if (fetches++ > 0) return;
      arrived();
      await opened;
    },
  });
});
after(async () => {
  release();
  await server?.proc.stop("SIGKILL");
  await git?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a delivery cut short by a server stop is acted on at the next start", { timeout: 240_000 }, async () => {
  const env = {
    DROVER_DATA_DIR: join(dir, "server"),
    DROVER_PORT: String(await freePort()),
    DROVER_ADMIN_TOKEN: admin,
    DROVER_VCS_POLL_SECONDS: "0",
  };
  server = await startServerProc(env);
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
  sh(dir, "init", "-q", "--bare", "-b", "main", "org/infra.git");
  const work = join(dir, "work");
  sh(dir, "init", "-q", "-b", "main", "work");
  sh(work, "remote", "add", "origin", join(dir, "org/infra.git"));
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
  await server.proc.stop("SIGTERM");
  const stopped = await server.proc.exited;
  assert.equal(stopped.code, 0, server.proc.output());
  release();

  server = await startServerProc(env);
  const delivery = await lookUntil("the delivery acted on after the restart", async () => {
    const listed = await callOk(server!.url, routes.listVcsDeliveries, admin, { params: { connection: "gh" } });
    return (listed.items as VcsDelivery[]).find((d) => d.deliveryId === sent.deliveryId && d.status === "processed");
  });
  assert.equal(delivery.outcomes.length, 1, JSON.stringify(delivery));
  assert.equal(delivery.outcomes[0]?.outcome, "started", JSON.stringify(delivery));
  const runs = await callOk(server.url, routes.listRuns, admin, { query: { workspace: "infra" } });
  assert.equal(runs.items.length, 1);
  assert.equal(runs.items[0].source.commitSha, sha);
});
