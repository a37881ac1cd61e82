import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes, type RunSource } from "@drover/protocol";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { hardened, ownedDir } from "../support/image-stack.js";
import { lookUntil } from "../support/poll.js";
import { ensureImages, podmanUnavailable, runContainer, type Container } from "../support/podman.js";
import { startStack, type Stack } from "../support/stack.js";
import { linkArgs, viaPoolConnectArgs } from "../support/vcs-cli.js";

/*
 * `drover agent vcs` as users run it: the drover image (hardened: UID 1000, read-only root), its
 * connections file mounted read-only, relaying a git server and a GitHub Enterprise API stand-in
 * that only it is told about. The server's connection names another host and holds no token.
 */

const skip = podmanUnavailable();
const token = "ghp_IMAGEtoken0123456789abcdefSECRET";
const sh = gitAs("Ada", "ada@example.com");
let stack: Stack;
let api: GithubApi;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let droverImage: string;
let agent: Container | undefined;

before(
  async () => {
    if (skip) return;
    ({ drover: droverImage } = (await ensureImages()).images);
    stack = await startStack({ DROVER_VCS_POLL_SECONDS: "1" });
    mkdirSync(join(stack.dir, "org"));
    api = await startGithubApi({ token, prefix: "/api/v3" });
    api.addRepo("org/infra");
    git = await startGitHttpServer(stack.dir, undefined, {
      api: { prefix: "/api/v3", target: api.url },
      basicAuth: { user: "x-access-token", password: token },
      host: "127.0.0.2",
    });
  },
  // The images may still be building when this file starts.
  { timeout: 20 * 60_000 },
);
after(async () => {
  await agent?.stop(5);
  await stack?.stop();
  await git?.close();
  await api?.close();
});

test(
  "drover agent vcs in the drover image fetches a commit and reports its status for the server",
  { skip },
  async () => {
    for (const args of [
      ["pool", "create", "relay", "--kind", "vcs"],
      viaPoolConnectArgs("ghe", "https://ghe.internal.invalid", "relay"),
    ]) {
      const r = await stack.cli(args);
      assert.equal(r.code, 0, r.stderr);
    }
    const relayToken = (
      await stack.server.api(routes.createPoolToken, { params: { pool: "relay" }, body: { description: "image" } })
    ).body.token as string;
    const config = join(stack.dir, "vcs-config");
    mkdirSync(config);
    writeFileSync(
      join(config, "connections.json"),
      JSON.stringify({ ghe: { provider: "github", url: git.url, token } }),
    );
    agent = runContainer([
      ...hardened,
      "-v",
      `${config}:/etc/drover/vcs:ro`,
      // The data dir is a volume, as the chart's is: the root is read-only and fetches work there.
      "-v",
      `${ownedDir(join(stack.dir, "vcs-agent-data"))}:/var/lib/drover/data`,
      "-e",
      `DROVER_URL=${stack.server.url}`,
      "-e",
      `DROVER_TOKEN=${relayToken}`,
      "-e",
      "DROVER_AGENT_NAME=vcs-image",
      "-e",
      "DROVER_AGENT_VCS_CONNECTIONS_FILE=/etc/drover/vcs/connections.json",
      "-e",
      "DROVER_AGENT_HEALTH_PORT=0",
      droverImage,
      "agent",
      "vcs",
    ]);
    await agent.waitFor(/VCS agent registered/);

    const work = hostedRepository(sh, stack.dir, "org/infra");
    const sha = commitAndPush(sh, work, "main", "Add v", { "main.tf": valueConfig("one") });
    api.repos.get("org/infra")!.commits[sha] = { message: "Add v", author: { name: "Ada", email: "ada@example.com" } };
    await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool } });
    const linked = await stack.cli(linkArgs("infra", "ghe", "org/infra", "main"));
    assert.equal(linked.code, 0, linked.stderr);

    const diagnose = () => agent?.output() ?? "";
    const run = await lookUntil(
      "the commit's run, fetched by the agent in the image",
      async () => {
        const runs = (await stack.server.api(routes.listRuns, { query: { workspace: "infra" } })).body.items as {
          id: string;
          source: RunSource | null;
        }[];
        return runs.find((r) => r.source?.commitSha === sha);
      },
      { diagnose },
    );
    assert.deepEqual(run.source, {
      repository: "org/infra",
      branch: "main",
      commitSha: sha,
      message: "Add v",
      author: "Ada <ada@example.com>",
      pullRequest: null,
    });
    assert.ok(
      git.requests.some((p) => p.endsWith("/git-upload-pack")),
      "the agent fetched over git's smart HTTP",
    );
    // The queued run's status goes out through the agent too: the API is reached from the image.
    await lookUntil(
      "the run's commit status, sent by the agent",
      async () => api.repos.get("org/infra")!.statuses.find((s) => s.sha === sha && s.context === "drover/infra"),
      { diagnose },
    );
    assert.deepEqual(api.invalid, []);
    assert.deepEqual(git.refused, []);
    assert.ok(!agent.output().includes(token), "the agent's output holds the token");
  },
);
