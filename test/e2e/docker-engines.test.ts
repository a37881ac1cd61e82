import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test, type TestContext } from "node:test";
import { dockerLabels, DockerEngine } from "@drover/agent/docker";
import { routes } from "@drover/protocol";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";
import { ensureImages, podmanUnavailable, startDockerApi, type DockerApi } from "../support/podman.js";
import type { Proc } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

/*
 * The docker driver runs the engine version a workspace asks for: the agent downloads and
 * verifies it into its cache (release server on 127.0.0.1, signed by a throwaway key), and the
 * run's container executes that binary, bind-mounted read-only. The runner image here is the
 * drover image, which carries no terraform at all: whatever terraform runs came from the agent.
 */

const skip = podmanUnavailable();
const realVersion = "1.11.4";

let stack: Stack;
let api: DockerApi;
let releases: TestReleaseServer;
let droverImage: string;
let engine: DockerEngine;

before(
  async () => {
    if (skip) return;
    ({ drover: droverImage } = (await ensureImages()).images);
    stack = await startStack();
    api = await startDockerApi(join(stack.dir, "docker.sock"));
    engine = new DockerEngine(api.socketPath);
    releases = await startReleaseServer([
      { engine: "terraform", version: realVersion, binary: "/usr/local/bin/terraform" },
      { engine: "terraform", version: "1.99.0" },
    ]);
    // A cold image build takes minutes; the other image tests give their set-up the same budget.
  },
  { timeout: 20 * 60_000 },
);
after(async () => {
  if (engine) for (const c of await engine.list([dockerLabels.agentTag])) await engine.remove(c.Id).catch(() => {});
  await engine?.close();
  await api?.stop();
  await stack?.stop();
  await releases?.close();
});

/** A docker-driver agent whose runs start from the drover image (no terraform in it) and whose engines come from the test releases. */
async function dockerAgent(t: TestContext, name: string): Promise<Proc> {
  const agent = await stack.startAgent(name, {
    DROVER_AGENT_DRIVER: "docker",
    DROVER_AGENT_DOCKER_HOST: `unix://${api.socketPath}`,
    DROVER_AGENT_DOCKER_IMAGE: droverImage,
    DROVER_AGENT_DOCKER_NETWORK: "host",
    DROVER_AGENT_DOCKER_MEMORY_MB: "512",
    TF_CLI_CONFIG_FILE: "",
    DROVER_AGENT_TERRAFORM_RELEASES_URL: releases.base("terraform"),
    DROVER_AGENT_ENGINE_SIGNING_KEYS: releases.keyFile,
    DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS: releases.fingerprint,
    DROVER_AGENT_ENGINE_PATH_FALLBACK: "false",
  });
  t.after(() => agent.stop("SIGTERM"));
  return agent;
}

const started = (agent: Proc): number => [...agent.output().matchAll(/run container started/g)].length;

test(
  "docker driver: a version the runner image lacks runs from the agent's verified download, mounted read-only; a tampered download fails the run with the reason and starts no container",
  { skip },
  async (t) => {
    const agent = await dockerAgent(t, "docker-engines");
    const create = await stack.server.api(routes.createWorkspace, {
      body: { name: "docker-pinned", pool: stack.pool, engineVersion: realVersion },
    });
    assert.equal(create.status, 201, JSON.stringify(create.body));
    // The provisioner tries to replace the binary and to add a file beside it.
    const probe =
      "ls /drover/engine; if cp /bin/sh /drover/engine/terraform 2>/dev/null || touch /drover/engine/planted 2>/dev/null; then echo ENGINE-WRITTEN; else echo ENGINE-READ-ONLY; fi; command -v terraform || echo no-terraform-in-image";
    const dir = writeConfig(stack.dir, "docker-pinned", {
      "main.tf": `resource "terraform_data" "a" {\n  provisioner "local-exec" {\n    command = "${probe}"\n  }\n}\n`,
    });
    const runId = await stack.startRun(dir, "docker-pinned", ["--auto-apply"]);
    const run = await stack.waitForRun(runId, ["applied", "errored", "failed", "canceled"], 240_000);
    const plan = await runLog(stack.server, runId, "plan");
    const apply = await runLog(stack.server, runId, "apply");
    assert.equal(run.status, "applied", `${run.errorMessage}\n${plan}\n${apply}\n${agent.output()}`);
    assert.match(
      plan,
      new RegExp(`terraform ${realVersion.replace(/\./g, "\\.")} \\(/drover/engine/terraform\\)`),
      "the plan ran the mounted release",
    );
    assert.match(
      plan,
      new RegExp(
        `terraform ${realVersion.replace(/\./g, "\\.")} downloaded from .*verified: sha256 ${releases.archiveSha("terraform", realVersion)}, SHA256SUMS signed by ${releases.fingerprint}`,
      ),
    );
    assert.match(
      apply,
      /terraform 1\.11\.4 from the agent's verified cache/,
      "the apply's container used the stored release",
    );
    assert.match(apply, /\(local-exec\): no-terraform-in-image/, "the image itself has no terraform");
    assert.match(apply, /\(local-exec\): ENGINE-READ-ONLY/, `the run cannot write the release:\n${apply}`);
    assert.doesNotMatch(apply, /\(local-exec\): ENGINE-WRITTEN/);
    assert.equal(
      releases.downloads.get(`terraform_${realVersion}_linux_amd64.zip`),
      1,
      "downloaded once for plan and apply",
    );

    // A release whose archive changed after it was signed.
    releases.lie("terraform", "1.99.0", "archive");
    await stack.server.api(routes.createWorkspace, {
      body: { name: "docker-tampered", pool: stack.pool, engineVersion: "1.99.0" },
    });
    const before = started(agent);
    const bad = await stack.startRun(
      writeConfig(stack.dir, "docker-tampered", { "main.tf": 'resource "terraform_data" "b" {}\n' }),
      "docker-tampered",
      ["--plan-only"],
    );
    const failed = await stack.waitForRun(bad, ["errored", "planned_and_finished", "failed"], 120_000);
    assert.equal(failed.status, "errored");
    assert.match(
      failed.errorMessage,
      /^engine_checksum_mismatch: .*terraform_1\.99\.0_linux_amd64\.zip has sha256 [0-9a-f]{64}, but the signed .*SHA256SUMS lists [0-9a-f]{64}; nothing was installed or run/,
    );
    assert.doesNotMatch(await runLog(stack.server, bad, "plan"), /\$ terraform init/);
    assert.equal(started(agent), before, "no container was started for the tampered run");
    assert.equal((await engine.list([`${dockerLabels.runId}=${bad}`])).length, 0);
    assert.equal(releases.executed("terraform", "1.99.0"), false);
  },
);

test(
  "docker driver: a workspace without a version on a runner image without an engine is refused before any release is downloaded",
  { skip },
  async (t) => {
    const agent = await dockerAgent(t, "docker-no-engine");
    const create = await stack.server.api(routes.createWorkspace, {
      body: { name: "docker-unversioned", pool: stack.pool },
    });
    assert.equal(create.status, 201, JSON.stringify(create.body));
    const archives = (): number => [...releases.downloads.values()].reduce((a, b) => a + b, 0);
    const before = archives();
    const runId = await stack.startRun(
      writeConfig(stack.dir, "docker-unversioned", { "main.tf": 'resource "terraform_data" "c" {}\n' }),
      "docker-unversioned",
      ["--plan-only"],
    );
    const run = await stack.waitForRun(runId, ["errored", "planned_and_finished", "failed"], 240_000);
    assert.equal(run.status, "errored", agent.output());
    assert.match(
      run.errorMessage,
      /^the runner image .* has no terraform on its PATH: use an image that has one, or set the workspace's engineVersion/,
    );
    assert.equal(archives(), before, "no release was downloaded for a container that could not mount it");
  },
);
