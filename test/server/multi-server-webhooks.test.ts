import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { createTestDatabase, type TestDatabase } from "../support/databases.js";
import { gitAs, hostedRepository } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { freePort, spawnDrover, type Proc } from "../support/processes.js";
import { routeCall, type RouteArgs } from "../support/typed-api.js";

// Two server processes on one PostgreSQL, behind one public URL: workspaces of one repository
// linked at once through either of them share one webhook, as they do through one server.

const token = "ghp_MULTItoken0123456789abcdefSECRET";
let database: TestDatabase;
const admin = "drv_u_multi-hooks.0123456789abcdefghij0123456789ab";
const servers: Proc[] = [];
/** Where each server listens: its public URL names the load balancer in front of both. */
const direct: string[] = [];
let gh: GithubApi;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let root: string;

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-multi-hooks-"));
  mkdirSync(join(root, "org"));
  hostedRepository(gitAs("Ada", "ada@example.com"), root, "org/infra");
  git = await startGitHttpServer(root, undefined, { basicAuth: { user: "x-access-token", password: token } });
  gh = await startGithubApi({ token, prefix: "/api/v3" });
  gh.addRepo("org/infra");
  database = await createTestDatabase("postgres");
  for (let i = 0; i < 2; i++) {
    const port = await freePort();
    const proc = spawnDrover(["server", "--port", String(port), "--database-url", database.url], {
      ...process.env,
      DROVER_DATA_DIR: join(root, `server-${i}`),
      DROVER_ADMIN_TOKEN: admin,
      DROVER_PUBLIC_URL: "https://drover.example.com",
      DROVER_LOG_LEVEL: "warn",
    });
    servers.push(proc);
    await proc.waitFor(/listening on/);
    direct.push(`http://127.0.0.1:${port}`);
  }
});
after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await database?.drop();
  await git?.close();
  await gh?.close();
  rmSync(root, { recursive: true, force: true });
});

/** Calls server `i` at its own address with the admin token. */
const call = <R extends Parameters<typeof routeCall>[1]>(i: number, route: R, ...[input]: RouteArgs<R>) =>
  routeCall(direct[i]!, route, ...([{ token: admin, ...input }] as RouteArgs<R>));

test("workspaces of one repository linked at once through two servers share one webhook", async () => {
  const a = {
    api: <R extends Parameters<typeof routeCall>[1]>(route: R, ...input: RouteArgs<R>) => call(0, route, ...input),
  };
  await a.api(routes.createPool, { body: { name: "p" } });
  const connected = await a.api(routes.createVcsConnection, {
    body: { name: "gh", provider: "github", url: git.url, apiUrl: gh.apiUrl, token },
  });
  assert.equal(connected.status, 201, JSON.stringify(connected.body));
  const names = Array.from({ length: 6 }, (_, i) => `multi-${i}`);
  for (const name of names) await a.api(routes.createWorkspace, { body: { name, pool: "p" } });
  const linked = await Promise.all(
    names.map((ws, i) =>
      call(i % 2, routes.linkWorkspaceVcs, {
        params: { ws },
        body: { connection: "gh", repository: "org/infra", branch: "main", triggerPaths: [] },
      }),
    ),
  );
  const hooks = [...gh.repos.get("org/infra")!.hooks.keys()];
  assert.equal(hooks.length, 1, JSON.stringify(linked.map((l) => l.body)));
  for (const res of linked) {
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual([res.body.webhookId, res.body.webhook?.registered], [hooks[0], true], JSON.stringify(res.body));
  }
});

test("unlinks and links of one repository at once through two servers leave every link on a webhook that exists", async () => {
  const names = Array.from({ length: 4 }, (_, i) => `later-${i}`);
  for (const name of names) await call(0, routes.createWorkspace, { body: { name, pool: "p" } });
  // The six linked above go; four new ones come, all at once.
  const unlinked = Array.from({ length: 6 }, (_, i) =>
    call(i % 2, routes.unlinkWorkspaceVcs, { params: { ws: `multi-${i}` } }),
  );
  const linked = names.map((ws, i) =>
    call(i % 2, routes.linkWorkspaceVcs, {
      params: { ws },
      body: { connection: "gh", repository: "org/infra", branch: "main", triggerPaths: [] },
    }),
  );
  for (const res of await Promise.all([...unlinked, ...linked])) assert.ok(res.status < 300, JSON.stringify(res.body));
  const hooks = [...gh.repos.get("org/infra")!.hooks.keys()];
  assert.equal(hooks.length, 1, "one webhook, no orphan");
  for (const ws of names) {
    const link = await call(0, routes.getWorkspaceVcs, { params: { ws } });
    assert.equal(link.body.webhookId, hooks[0], `${ws} points at the webhook that exists`);
  }
});

test("a workspace re-linked to another repository, while a workspace links to the one it leaves on another server, leaves both on webhooks that exist", async () => {
  for (const repository of ["org/left", "org/right"]) {
    gh.addRepo(repository);
    hostedRepository(gitAs("Ada", "ada@example.com"), root, repository);
  }
  for (const name of ["mover", "newcomer"]) await call(0, routes.createWorkspace, { body: { name, pool: "p" } });
  const to = (repository: string) => ({ connection: "gh", repository, branch: "main", triggerPaths: [] });
  const first = await call(0, routes.linkWorkspaceVcs, { params: { ws: "mover" }, body: to("org/left") });
  assert.equal(first.body.webhook?.registered, true, JSON.stringify(first.body));
  // The move waits in org/right's webhook creation; meanwhile the newcomer links org/left on the other server.
  const hold = gh.holdHookCreates("org/right");
  const moving = call(0, routes.linkWorkspaceVcs, { params: { ws: "mover" }, body: to("org/right") });
  await hold.arrived;
  const newcomer = await call(1, routes.linkWorkspaceVcs, { params: { ws: "newcomer" }, body: to("org/left") });
  hold.release();
  const moved = await moving;
  for (const [ws, res, repository] of [
    ["newcomer", newcomer, "org/left"],
    ["mover", moved, "org/right"],
  ] as const) {
    const hooks = [...gh.repos.get(repository)!.hooks.keys()];
    assert.equal(hooks.length, 1, `${repository}: one webhook`);
    assert.deepEqual([res.body.webhookId, res.body.webhook?.registered], [hooks[0], true], JSON.stringify(res.body));
    const link = await call(0, routes.getWorkspaceVcs, { params: { ws } });
    assert.equal(link.body.webhookId, hooks[0], `${ws} points at ${repository}'s webhook`);
  }
});
