import assert from "node:assert/strict";
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { isTerminalRun, routes } from "@drover/protocol";
import { until } from "../support/marked-processes.js";
import { client } from "../support/typed-api.js";
import { freePort } from "../support/processes.js";
import { hardened, httpOk, ownedDir, startServerContainer } from "../support/image-stack.js";
import { request } from "node:http";
import {
  ensureImages,
  podmanOk,
  podmanUnavailable,
  runContainer,
  startDockerApi,
  testLabel,
  type BuiltImages,
  type Container,
} from "../support/podman.js";

// The images built from deploy/docker/*Dockerfile (scripts/build-images.mjs), run for real
// under podman: as UID 1000, with a read-only root filesystem and tmpfs where they write.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const adminToken = "drv_u_image-admin.0123456789abcdefghij0123456789ab";
const unavailable = podmanUnavailable();
/** A cold build (debootstrap, apt, npm ci, better-sqlite3 compiled) on a loaded 2-core machine. */
const buildTimeoutMs = 20 * 60_000;

let built: BuiltImages;
let dir: string;
const containers: Container[] = [];

describe("locally built images", { skip: unavailable }, () => {
  before(
    async () => {
      built = await ensureImages();
      console.log(`[images] ready in ${built.totalMs} ms: ${JSON.stringify(built.timingsMs)}`);
      dir = mkdtempSync(join(tmpdir(), "drover-images-"));
    },
    { timeout: buildTimeoutMs },
  );

  after(async () => {
    await Promise.all(containers.map((c) => c.stop(5)));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("both images run as UID 1000 and carry no compiler, package lists or package caches", async () => {
    for (const image of [built.images.drover, built.images.runner]) {
      const user = (await podmanOk(["image", "inspect", "--format", "{{.Config.User}}", image])).trim();
      assert.equal(user, "1000:1000", `${image} runs as ${user}`);
      const mount = (await podmanOk(["image", "mount", image])).trim();
      try {
        const debs = readdirSync(join(mount, "var/cache/apt/archives")).filter((f) => f.endsWith(".deb"));
        assert.deepEqual(debs, [], `${image} keeps downloaded packages`);
        const lists = readdirSync(join(mount, "var/lib/apt/lists")).filter((f) => f !== "partial" && f !== "lock");
        assert.deepEqual(lists, [], `${image} keeps apt's package lists`);
        assert.deepEqual(
          readdirSync(join(mount, "var/cache/apt")).filter((f) => f.endsWith(".bin")),
          [],
          `${image} keeps apt's binary caches`,
        );
        for (const tool of ["gcc", "cc", "g++", "c++", "make", "cc1"]) {
          for (const bin of ["usr/bin", "usr/local/bin", "bin"])
            assert.ok(!existsSync(join(mount, bin, tool)), `${image} contains /${bin}/${tool}`);
        }
        assert.ok(!existsSync(join(mount, "usr/lib/gcc")), `${image} contains /usr/lib/gcc`);
        // tsc's build info is what `drover agent run` compares its bundle with (packages/cli/src/main.ts):
        // in an image whose files a derived image copies (new times), it would refuse every agent.
        if (image === built.images.drover) {
          const packages = join(mount, "opt/drover/packages");
          assert.ok(existsSync(packages), `${image} has no /opt/drover/packages`);
          const infos = readdirSync(packages).filter((pkg) => existsSync(join(packages, pkg, "dist", ".tsbuildinfo")));
          assert.deepEqual(infos, [], `${image} keeps tsc's .tsbuildinfo in these packages`);
        }
        for (const cache of ["root/.npm", "root/.cache", "home/node/.npm", "home/drover/.npm"])
          assert.ok(!existsSync(join(mount, cache)), `${image} contains /${cache}`);
      } finally {
        await podmanOk(["image", "unmount", image]);
      }
    }
  });

  test("the drover image runs Node 24 (the LTS the images ship), and its better-sqlite3 was built for that Node", async () => {
    const probe =
      'const D = require("/opt/drover/node_modules/better-sqlite3"); const db = new D(":memory:"); ' +
      'console.log(process.version, db.prepare("select sqlite_version() as v").get().v)';
    const out = await podmanOk([
      "run",
      "--rm",
      "--label",
      testLabel,
      "--entrypoint",
      "node",
      built.images.drover,
      "-e",
      probe,
    ]);
    assert.match(out.trim(), /^v24\.\d+\.\d+ 3\.\d+\.\d+$/, out);
  });

  test("drover server in the drover image (UID 1000, read-only root) is healthy and serves a run of examples/hello to an agent in the same image", async () => {
    const server = await startServerContainer(built.images.drover, dir, adminToken);
    containers.push(server.container);
    const url = server.url;
    assert.ok(await httpOk(`${url}/healthz`));
    const whoami = await podmanOk(["exec", server.container.name, "id", "-u"]);
    assert.equal(whoami.trim(), "1000");
    // The root filesystem refuses writes; only the tmpfs mounts take them.
    const write = await podmanOk(["exec", server.container.name, "sh", "-c", "touch /opt/drover/x 2>&1; echo rc=$?"]);
    assert.match(write, /Read-only file system[\s\S]*rc=1/);

    const cli = server.cli;
    const pool = await cli(["pool", "create", "images", "--json"]);
    assert.equal(pool.code, 0, pool.stderr + pool.stdout);
    const ws = await cli(["workspace", "create", "hello", "--pool", "images", "--json"]);
    assert.equal(ws.code, 0, ws.stderr + ws.stdout);
    const token = await cli(["token", "create", "--pool", "images", "--json"]);
    assert.equal(token.code, 0, token.stderr + token.stdout);
    const poolToken = (JSON.parse(token.stdout) as { token: string }).token;

    const tfrc = join(dir, "terraformrc");
    writeFileSync(tfrc, "");
    const agentHealth = await freePort();
    const agent = runContainer([
      ...hardened,
      "-v",
      `${ownedDir(join(dir, "agent-state"))}:/var/lib/drover`,
      // terraform from the host, as an operator mounts or bakes in their own.
      "-v",
      "/usr/local/bin/terraform:/usr/local/bin/terraform:ro",
      "-v",
      `${tfrc}:/etc/drover-terraformrc:ro`,
      "-e",
      "TF_CLI_CONFIG_FILE=/etc/drover-terraformrc",
      "-e",
      "CHECKPOINT_DISABLE=1",
      "-e",
      `DROVER_URL=${url}`,
      "-e",
      `DROVER_TOKEN=${poolToken}`,
      "-e",
      "DROVER_AGENT_NAME=image-agent",
      "-e",
      `DROVER_AGENT_HEALTH_PORT=${agentHealth}`,
      built.images.drover,
      "agent",
      "run",
    ]);
    containers.push(agent);
    await until(
      "the agent in the drover image to be healthy",
      async () => {
        if (agent.child.exitCode !== null) throw new Error(`the agent container exited:\n${agent.output()}`);
        return httpOk(`http://127.0.0.1:${agentHealth}/healthz`);
      },
      60_000,
    );

    const started = await cli([
      "run",
      "start",
      join(repo, "examples", "hello"),
      "--workspace",
      "hello",
      "--auto-apply",
      "--no-follow",
      "--json",
    ]);
    assert.equal(started.code, 0, started.stderr + started.stdout);
    const id = (JSON.parse(started.stdout) as { id: string }).id;
    let status = "";
    await until(
      "the run to end",
      async () => {
        const run = await client(url, adminToken).call(routes.getRun, { params: { id } });
        status = run.status;
        return isTerminalRun(run.status);
      },
      180_000,
    );
    assert.equal(status, "applied", `agent:\n${agent.output()}\nserver:\n${server.container.output()}`);
    const logs = await cli(["run", "logs", id, "--phase", "apply"]);
    assert.match(logs.stdout, /Hello from Drover, from run/);
  });

  test("the runner image's entrypoint is the exec-loop, and it runs terraform from the image (UID 1000, read-only root)", async () => {
    const exec = join(dir, "exec");
    const work = join(exec, "work");
    mkdirSync(work, { recursive: true });
    writeFileSync(join(work, "main.tf"), readFileSync(join(repo, "examples", "hello", "main.tf")));
    writeFileSync(join(exec, "terraformrc"), "");
    for (const p of [exec, work, join(work, "main.tf"), join(exec, "terraformrc")]) chownSync(p, 1000, 1000);
    const runner = runContainer([
      ...hardened,
      "-v",
      `${exec}:/drover/exec`,
      "-e",
      "TF_CLI_CONFIG_FILE=/drover/exec/terraformrc",
      "-e",
      "CHECKPOINT_DISABLE=1",
      "-e",
      "DROVER_RUN_ID=image-test",
      "-e",
      "DROVER_WORKSPACE_NAME=runner",
      built.images.runner,
    ]);
    containers.push(runner);
    await until("the exec-loop's heartbeat", () => existsSync(join(exec, "heartbeat")), 60_000);
    const step = join(exec, "steps", "1");
    mkdirSync(step, { recursive: true });
    writeFileSync(
      join(step, "script.sh"),
      "cd /drover/exec/work\ncommand -v terraform\nterraform init -input=false -no-color >/dev/null\nexec terraform apply -auto-approve -input=false -no-color\n",
    );
    for (const p of [join(exec, "steps"), step, join(step, "script.sh")]) chownSync(p, 1000, 1000);
    writeFileSync(join(step, "ready.tmp"), "");
    renameSync(join(step, "ready.tmp"), join(step, "ready"));
    await until("the step's exit file", () => existsSync(join(step, "exit")), 120_000);
    const output = readFileSync(join(step, "output"), "utf8");
    assert.equal(readFileSync(join(step, "exit"), "utf8").trim(), "0", output);
    assert.match(output, /^\/usr\/local\/bin\/terraform$/m);
    assert.match(output, /Hello from Drover, from run image-test on workspace runner/);
    assert.match(output, /Apply complete! Resources: 2 added/);
    writeFileSync(join(exec, "shutdown"), "");
    const { code } = await runner.exited;
    assert.equal(code, 0, runner.output());
  });

  test("podman's Docker Engine API on a unix socket lists the built images (what the docker driver talks to)", async () => {
    const api = await startDockerApi(join(dir, "docker.sock"));
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const req = request({ socketPath: api.socketPath, path: "/v1.41/images/json" }, (res) => {
          let text = "";
          res.on("data", (d: Buffer) => (text += d.toString()));
          res.on("end", () =>
            res.statusCode === 200 ? resolve(text) : reject(new Error(`${res.statusCode}: ${text}`)),
          );
        });
        req.on("error", reject);
        req.end();
      });
      const tags = (JSON.parse(body) as { RepoTags?: string[] | null }[]).flatMap((i) => i.RepoTags ?? []);
      assert.ok(tags.includes(built.images.drover) && tags.includes(built.images.runner), tags.join(", "));
    } finally {
      await api.stop();
    }
  });
});
