import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { loadAgentConfig } from "@drover/agent";
import {
  cgroupOomKills,
  DiskWatch,
  diskUsage,
  memoryEventsFile,
  runnerImageFor,
  StreamDemuxer,
} from "@drover/agent/docker";
import { DroverError, newPoolToken, type JobAssignment } from "@drover/protocol";
import { spawnDrover } from "../support/processes.js";
import { within } from "../support/poll.js";
import { tempDir } from "../support/temp-dir.js";

// The docker driver's settings: each compiles to what the driver sends the daemon, and each bad
// value stops the agent at start with one line naming it.

const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_x" });
const load = (env: Record<string, string>) =>
  loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_DRIVER: "docker", ...env });

test("docker settings compile with their defaults (agent as root: runs as 65532:65532, no host account's uid) and with every value set", () => {
  const d = load({}).docker!;
  assert.equal(d.socketPath, "/var/run/docker.sock");
  assert.equal(d.image, "ghcr.io/drover-dev/drover-runner:1.11.4");
  // Not 1000, the host's first regular account: its processes could read runs' /proc environ (N5).
  if (process.getuid?.() === 0) assert.deepEqual(d.user, { uid: 65532, gid: 65532 });
  assert.equal(d.memoryBytes, 4096 * 1024 * 1024);
  assert.equal(d.nanoCpus, 2e9);
  assert.equal(d.network, "bridge");
  assert.equal(d.diskBytes, 10_240 * 1024 * 1024);
  const set = load({
    DROVER_AGENT_DOCKER_HOST: "unix:///run/podman/podman.sock",
    DROVER_AGENT_DOCKER_IMAGE: "registry.example/runner:7",
    DROVER_AGENT_DOCKER_USER: "2000:3000",
    DROVER_AGENT_DOCKER_MEMORY_MB: "0",
    DROVER_AGENT_DOCKER_CPUS: "1.5",
    DROVER_AGENT_DOCKER_NETWORK: "runs",
    DROVER_AGENT_DOCKER_DISK_MB: "0",
  }).docker!;
  assert.deepEqual(set, {
    socketPath: "/run/podman/podman.sock",
    image: "registry.example/runner:7",
    allowedImages: [],
    user: { uid: 2000, gid: 3000 },
    memoryBytes: 0,
    nanoCpus: 1.5e9,
    network: "runs",
    diskBytes: 0,
  });
  assert.equal(load({ DROVER_AGENT_CONCURRENCY: "50" }).concurrency, 50, "a docker agent may run up to 50 jobs");
  assert.equal(loadAgentConfig({ DROVER_TOKEN: token }).docker, undefined, "other drivers have no docker settings");
  assert.equal(
    loadAgentConfig({ DROVER_TOKEN: token }, { driver: "docker", dockerImage: "from-flag:1" }).docker?.image,
    "from-flag:1",
    "flags override",
  );
});

test("DROVER_AGENT_DOCKER_ALLOWED_IMAGES decides which workspace runner images a job's container may start from", () => {
  assert.deepEqual(load({}).docker!.allowedImages, [], "by default workspaces cannot choose");
  const settings = load({
    DROVER_AGENT_DOCKER_IMAGE: "ghcr.io/drover-dev/drover-runner:1.11.4",
    DROVER_AGENT_DOCKER_ALLOWED_IMAGES: " registry.example.com/runners/* , ghcr.io/acme/tf:1.9 ,",
  }).docker!;
  assert.deepEqual(settings.allowedImages, ["registry.example.com/runners/*", "ghcr.io/acme/tf:1.9"]);
  const ws = (runnerImage: string | null): JobAssignment["workspace"] => ({
    id: "ws_1",
    name: "net",
    engine: "terraform",
    engineVersion: null,
    workingDirectory: "",
    runnerImage,
  });
  assert.equal(
    runnerImageFor(settings, ws(null)),
    "ghcr.io/drover-dev/drover-runner:1.11.4",
    "no choice: the agent's own",
  );
  assert.equal(
    runnerImageFor(settings, ws("registry.example.com/runners/tf:1.9")),
    "registry.example.com/runners/tf:1.9",
    "a prefix entry",
  );
  assert.equal(runnerImageFor(settings, ws("ghcr.io/acme/tf:1.9")), "ghcr.io/acme/tf:1.9", "an exact entry");
  assert.equal(
    runnerImageFor({ ...settings, allowedImages: [] }, ws("ghcr.io/drover-dev/drover-runner:1.11.4")),
    "ghcr.io/drover-dev/drover-runner:1.11.4",
    "naming the agent's own image needs no entry",
  );
  for (const refused of [
    "ghcr.io/acme/tf:1.10",
    "registry.example.com/runnersx/tf:1",
    "registry.example.com/runners",
    "docker.io/library/alpine",
    "alpine",
  ]) {
    assert.throws(
      () => runnerImageFor(settings, ws(refused)),
      (err: unknown) =>
        err instanceof DroverError &&
        err.code === "forbidden" &&
        err.message.includes(`workspace net asks for the runner image ${refused}, which this agent does not allow`) &&
        err.message.includes("DROVER_AGENT_DOCKER_ALLOWED_IMAGES"),
      refused,
    );
  }
  assert.throws(
    () => runnerImageFor({ ...settings, allowedImages: ["*"] }, ws("--privileged")),
    /not an image reference/,
    "the agent checks what it hands the daemon itself",
  );
  assert.equal(
    runnerImageFor({ ...settings, allowedImages: ["*"] }, ws("alpine:3")),
    "alpine:3",
    "'*' allows any image",
  );
});

const bad: Array<[string, Record<string, string>, RegExp]> = [
  [
    "an allow-list entry that is no image",
    { DROVER_AGENT_DOCKER_ALLOWED_IMAGES: "ghcr.io/acme/tf:1.9,Not An Image" },
    /DROVER_AGENT_DOCKER_ALLOWED_IMAGES must list image references or prefixes ending in '\*', separated by commas; not one: "Not An Image"/,
  ],
  [
    "a TCP Docker host",
    { DROVER_AGENT_DOCKER_HOST: "tcp://10.0.0.1:2375" },
    /DROVER_AGENT_DOCKER_HOST must be unix:\/\/\/path\/to\/docker.sock/,
  ],
  ["a root container user", { DROVER_AGENT_DOCKER_USER: "0:0" }, /DROVER_AGENT_DOCKER_USER must not be root/],
  [
    "a named container user",
    { DROVER_AGENT_DOCKER_USER: "drover" },
    /DROVER_AGENT_DOCKER_USER must be a numeric uid or uid:gid, got "drover"/,
  ],
  [
    "a memory limit too small to start terraform",
    { DROVER_AGENT_DOCKER_MEMORY_MB: "8" },
    /DROVER_AGENT_DOCKER_MEMORY_MB must be 0 \(no limit\) or at least 16, got 8/,
  ],
  [
    "a memory limit in another unit",
    { DROVER_AGENT_DOCKER_MEMORY_MB: "2g" },
    /DROVER_AGENT_DOCKER_MEMORY_MB must be a whole number from 0 to/,
  ],
  [
    "a CPU limit that is not a number",
    { DROVER_AGENT_DOCKER_CPUS: "two" },
    /DROVER_AGENT_DOCKER_CPUS must be a number of CPUs from 0 \(no limit\) to 1024, like 1.5, got "two"/,
  ],
  [
    "a concurrency above the docker driver's limit",
    { DROVER_AGENT_CONCURRENCY: "51" },
    /DROVER_AGENT_CONCURRENCY must be a whole number from 1 to 50, got "51"/,
  ],
  [
    "an unknown driver",
    { DROVER_AGENT_DRIVER: "lxc" },
    /DROVER_AGENT_DRIVER must be one of local, kubernetes, docker, got "lxc"/,
  ],
];

for (const [what, env, message] of bad) {
  test(`drover agent run --driver docker with ${what} exits 2 with one clear line`, async () => {
    const proc = spawnDrover(["agent", "run"], {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DROVER_TOKEN: token,
      DROVER_AGENT_DRIVER: "docker",
      DROVER_AGENT_HEALTH_PORT: "0",
      ...env,
    });
    const exit = await within(proc.exited, 15_000);
    if (!exit) await proc.stop("SIGKILL");
    const output = proc.output().trim();
    assert.equal(exit?.code, 2, output);
    assert.match(output, message);
    assert.equal(output.split("\n").length, 1, output);
  });
}

test("a docker agent whose socket answers nothing stops with a line naming the socket, exit 1", async () => {
  const dir = tempDir("drover-docker-none-");
  const proc = spawnDrover(["agent", "run"], {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DROVER_TOKEN: token,
    DROVER_AGENT_DRIVER: "docker",
    DROVER_AGENT_DOCKER_HOST: `unix://${join(dir, "missing.sock")}`,
    DROVER_AGENT_DATA_DIR: join(dir, "data"),
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  const exit = await proc.exited;
  assert.equal(exit.code, 1, proc.output());
  assert.match(proc.output(), new RegExp(`cannot reach the Docker daemon at ${join(dir, "missing.sock")}`));
  rmSync(dir, { recursive: true, force: true });
});

test("the multiplexed stream decoder yields whole frames in order however the chunks split them", () => {
  const frame = (kind: number, text: string) => {
    const body = Buffer.from(text);
    const head = Buffer.alloc(8);
    head[0] = kind;
    head.writeUInt32BE(body.length, 4);
    return Buffer.concat([head, body]);
  };
  const all = Buffer.concat([frame(1, "out one\n"), frame(2, "err\n"), frame(1, ""), frame(1, "x".repeat(70_000))]);
  for (const step of [1, 3, 8, 9, 4096, all.length]) {
    const got: Array<[string, string]> = [];
    const d = new StreamDemuxer((s, data) => got.push([s, data.toString()]));
    for (let i = 0; i < all.length; i += step) d.push(all.subarray(i, i + step));
    assert.deepEqual(
      got,
      [
        ["stdout", "out one\n"],
        ["stderr", "err\n"],
        ["stdout", ""],
        ["stdout", "x".repeat(70_000)],
      ],
      `chunks of ${step}`,
    );
    assert.equal(d.leftover, 0);
  }
});

test("the OOM counter is read from the container's memory cgroup, v1 or v2, and is 0 where it cannot be seen", () => {
  const root = tempDir("drover-oom-");
  const proc = join(root, "proc");
  const cg = join(root, "cgroup");
  mkdirSync(join(proc, "41"), { recursive: true });
  writeFileSync(join(proc, "41", "cgroup"), "5:devices:/c1\n4:memory:/c1\n0::/c1\n");
  mkdirSync(join(cg, "memory", "c1"), { recursive: true });
  writeFileSync(join(cg, "memory", "c1", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  const v1 = memoryEventsFile(41, proc, cg);
  assert.equal(v1, join(cg, "memory", "c1", "memory.oom_control"));
  assert.equal(cgroupOomKills(v1!), 2);
  mkdirSync(join(proc, "42"), { recursive: true });
  writeFileSync(join(proc, "42", "cgroup"), "0::/system.slice/c2\n");
  mkdirSync(join(cg, "system.slice", "c2"), { recursive: true });
  writeFileSync(join(cg, "system.slice", "c2", "memory.events"), "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n");
  assert.equal(cgroupOomKills(memoryEventsFile(42, proc, cg)!), 1);
  assert.equal(memoryEventsFile(43, proc, cg), undefined, "a process this host cannot see");
  assert.equal(cgroupOomKills(join(root, "nothing")), undefined, "gone with its container: not known");
});

test("the disk watch counts a job's directories' allocated blocks, follows no link, and reports the first measure past the bound", async () => {
  const root = mkdtempSync(join(tmpdir(), "drover-disk-"));
  const [run, exec] = [join(root, "run"), join(root, "exec")];
  mkdirSync(run);
  mkdirSync(exec);
  writeFileSync(join(run, "big"), Buffer.alloc(3 * 1024 * 1024, 1));
  writeFileSync(join(exec, "out"), Buffer.alloc(1024 * 1024, 1));
  // Links out of the directories are not followed: the agent's data or / would count otherwise.
  symlinkSync("/", join(run, "root"));
  symlinkSync(tmpdir(), join(exec, "tmp"));
  const used = await diskUsage([exec, run], AbortSignal.timeout(10_000));
  assert.ok(used >= 4 * 1024 * 1024 && used < 5 * 1024 * 1024, `4 MiB and the directories' own blocks, got ${used}`);

  const watch = (limitBytes: number) =>
    new Promise<{ over: number | undefined; errors: unknown[] }>((resolve) => {
      const errors: unknown[] = [];
      const w = new DiskWatch({
        dirs: [exec, run],
        limitBytes,
        intervalMs: 1,
        onExceeded: (n) => resolve({ over: n, errors }),
        onError: (e) => errors.push(e),
      });
      // Below the bound it measures on: the third measure's result decides.
      void w
        .check()
        .then(() => w.check())
        .then(async (over) => {
          if (!over) {
            w.stop();
            resolve({ over: undefined, errors });
          }
        });
    });
  assert.deepEqual(await watch(8 * 1024 * 1024), { over: undefined, errors: [] }, "under the bound: nothing reported");
  const past = await watch(2 * 1024 * 1024);
  assert.ok(past.over !== undefined && past.over >= 4 * 1024 * 1024, "past the bound: reported with what was used");
  rmSync(root, { recursive: true, force: true });
});
