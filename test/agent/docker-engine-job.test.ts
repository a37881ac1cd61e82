import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { pino } from "pino";
import { JobRun, type JobApi, type JobSettings } from "@drover/agent";
import { ContainerJob, ContainerRemovals, DockerEngine } from "@drover/agent/docker";
import type { JobAssignment, JobOutcome } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { within } from "../support/poll.js";
import { jobAssignment } from "../support/job-assignment.js";

// One job of the docker driver against a stand-in for the Docker daemon (a unix socket whose
// answers each test writes): what the job's engine calls do when the job is canceled, and what
// becomes of a container the daemon would not remove. No real daemon: the stand-in can stall a
// pull or fail a removal on cue, which a real one cannot be made to do.

const dir = mkdtempSync(join(tmpdir(), "drover-docker-job-"));
const servers: Server[] = [];
after(async () => {
  for (const s of servers) s.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  rmSync(dir, { recursive: true, force: true });
});

/** A Docker daemon stand-in on a unix socket of its own: `answer` writes each request's answer (or none). */
async function daemon(
  name: string,
  answer: (req: IncomingMessage, res: ServerResponse, route: string) => void,
): Promise<{ path: string; routes: string[] }> {
  const path = join(dir, `${name}.sock`);
  const routes: string[] = [];
  const server = createServer((req, res) => {
    // The route without the API version and query: `POST /images/create`.
    const route = `${req.method} ${(req.url ?? "").replace(/^\/v[\d.]+/, "").split("?")[0]}`;
    routes.push(route);
    answer(req, res, route);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { path, routes };
}

const execLoopPath = createRequire(import.meta.url).resolve("@drover/agent/exec-loop.sh");

/** A job's container against the stand-in daemon of `engine`, its data in `dataDir`. */
function containerJob(
  engine: DockerEngine,
  a: JobAssignment,
  dataDir: string,
  removals = new ContainerRemovals(engine, pino({ level: "silent" })),
  log = pino({ level: "silent" }),
): ContainerJob {
  return new ContainerJob({
    engine,
    settings: {
      socketPath: engine.socketPath,
      image: "registry.invalid/drover-runner:1",
      allowedImages: [],
      user: { uid: 65532, gid: 65532 },
      memoryBytes: 0,
      nanoCpus: 0,
      network: "host",
      diskBytes: 0,
    },
    assignment: a,
    dataDir,
    serverUrl: "http://server.invalid",
    agentName: "docker-job-test",
    agentTag: "docker-job-test",
    execLoopPath,
    taskCaCertPath: undefined,
    hooksDir: undefined,
    log,
    removals,
  });
}

test("a cancel while the runner image's pull hangs aborts the pull at once and ends the run canceled, long before the pull's deadline", async () => {
  let pullSeen: () => void = () => undefined;
  const pulling = new Promise<void>((resolve) => (pullSeen = resolve));
  let pullEnded: () => void = () => undefined;
  const pullAborted = new Promise<string>((resolve) => (pullEnded = () => resolve("aborted")));
  const docker = await daemon("stalled-pull", (req, res, route) => {
    if (route.startsWith("GET /images/")) {
      res.writeHead(404, { "content-type": "application/json" }).end('{"message":"no such image"}');
    } else if (route === "POST /images/create") {
      // One line of progress, then the registry stalls: nothing more, and no end.
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"status":"Pulling from drover-runner"}\n');
      res.on("close", pullEnded);
      pullSeen();
    } else res.writeHead(500).end('{"message":"not expected here"}');
  });
  // A deadline far past what the test waits: only the job's signal can end the pull in time.
  const engine = new DockerEngine(docker.path, { callTimeoutMs: 60_000, pullSilenceMs: 120_000 });
  const a = jobAssignment();
  const dataDir = join(dir, "cancel");
  const job = containerJob(engine, a, dataDir);
  const finished: JobOutcome[] = [];
  let canceledAt = 0;
  const api: JobApi = {
    start: async () => "planning",
    // The user cancels once the pull hangs; the next heartbeat is held until the job is over.
    heartbeat: async (_waitMs, signal) => {
      if (canceledAt === 0) {
        await pulling;
        canceledAt = Date.now();
        return { cancelRequested: true, leaseExpiresAt: new Date(Date.now() + 60_000).toISOString() };
      }
      return new Promise((_resolve, reject) =>
        signal?.addEventListener("abort", () => reject(new Error("job over")), { once: true }),
      );
    },
    configuration: async () => rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "n" {}\n' }]),
    variables: async () => [],
    appendLog: async (offset, data) => offset + data.length,
    uploadPlan: async () => undefined,
    uploadPlanJson: async () => undefined,
    uploadProviderSchemas: async () => undefined,
    downloadPlan: async () => Buffer.from("plan"),
    state: async () => Buffer.from("{}"),
    uploadOutputs: async () => undefined,
    finish: async (outcome) => void finished.push(outcome),
  };
  const settings: JobSettings = {
    name: "docker-job-test",
    dataDir: job.runBase,
    cacheDir: join(dataDir, "cache"),
    stopAction: "graceful",
    taskCaCertPath: undefined,
    hooksDir: undefined,
    hookTimeoutMs: 10_000,
    token: undefined,
  };
  const run = new JobRun({
    assignment: a,
    client: { baseUrl: "http://server.invalid", job: () => api },
    settings,
    logger: pino({ level: "silent" }),
    runner: job,
  });
  try {
    const executed = run.execute().then(() => "ended");
    assert.equal(
      await within(executed, 20_000),
      "ended",
      `the run had not ended 20 s after the cancel (it waits for the pull's deadline); the daemon saw ${docker.routes.join(", ")}`,
    );
    assert.deepEqual(finished, ["canceled"]);
    // Before the job's container is closed: the job's own signal ended the pull.
    assert.equal(await within(pullAborted, 5_000), "aborted", "the pull's request was still open");
    assert.ok(Date.now() - canceledAt < 20_000);
    assert.ok(!docker.routes.includes("POST /containers/create"), "no container was created after the cancel");
  } finally {
    await job.close();
    await engine.close();
  }
});

/** A daemon whose run container starts, and whose first `failures` removals of it fail; `removed` resolves on the one that works. */
async function awayAtRemoval(name: string, failures: number) {
  let removedNow: () => void = () => undefined;
  const removed = new Promise<void>((resolve) => (removedNow = resolve));
  let followedNow: () => void = () => undefined;
  const followed = new Promise<void>((resolve) => (followedNow = resolve));
  let removals = 0;
  const docker = await daemon(name, (_req, res, route) => {
    const json = (status: number, body: unknown) =>
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    if (route.startsWith("GET /images/")) json(200, {});
    else if (route === "POST /containers/create") json(201, { Id: "c1" });
    else if (route === "POST /containers/c1/start") res.writeHead(204).end();
    else if (route === "GET /containers/c1/json")
      json(200, {
        Id: "c1",
        State: { Status: "running", Running: true, OOMKilled: false, ExitCode: 0, Pid: 0 },
        Config: { Labels: {} },
      });
    else if (route === "GET /containers/c1/logs") {
      // The output stream stays open while the container runs.
      res.writeHead(200, { "content-type": "application/vnd.docker.raw-stream" }).flushHeaders();
      followedNow();
    } else if (route === "POST /containers/c1/wait") json(200, { StatusCode: 0 });
    else if (route === "DELETE /containers/c1") {
      if (++removals <= failures) json(500, { message: "the daemon is restarting" });
      else {
        res.writeHead(204).end();
        removedNow();
      }
    } else json(500, { message: "not expected here" });
  });
  return { ...docker, removed, followed, removals: () => removals };
}

/** A logger whose lines the test reads back; `logged` resolves on the first line matching `awaited`. */
function recordingLogger(awaited = /^$/) {
  const lines: Array<{ level: number; msg: string }> = [];
  let seen: () => void = () => undefined;
  const logged = new Promise<string>((resolve) => (seen = () => resolve("logged")));
  const logger = pino(
    { level: "debug" },
    {
      write: (text: string) => {
        const line = JSON.parse(text) as { level: number; msg: string };
        lines.push(line);
        if (awaited.test(line.msg)) seen();
      },
    },
  );
  return { logger, lines, logged };
}

/** Starts a job's container on the stand-in, then ends the job: its container is closed. */
async function runAndClose(job: ContainerJob, followed: Promise<void>): Promise<void> {
  const jobSignal = new AbortController();
  // Asking for the engine starts the container; the stand-in runs no exec-loop to answer it.
  void job.engine("terraform", null, "", jobSignal.signal).catch(() => undefined);
  await followed;
  jobSignal.abort();
  await job.close();
}

test("a run container whose removal failed at the job's end is removed later, on the retry timer, without an agent restart; the failure is logged once", async () => {
  const docker = await awayAtRemoval("removal-retried", 3);
  const engine = new DockerEngine(docker.path, { callTimeoutMs: 10_000 });
  const { logger, lines, logged } = recordingLogger(/removed a run container whose removal had failed/);
  const removals = new ContainerRemovals(engine, logger, { firstDelayMs: 10, maxDelayMs: 40 });
  const job = containerJob(engine, jobAssignment(), join(dir, "retried"), removals, logger);
  try {
    await runAndClose(job, docker.followed);
    assert.equal(docker.removals(), 1, "the job's end tried once, and did not wait for the retries");
    assert.equal(
      await within(logged, 10_000),
      "logged",
      `the container was not removed after its failed removal (${docker.removals()} tries)`,
    );
    await docker.removed;
    assert.equal(docker.removals(), 4, "three failed tries, then the one that removed it");
    const failed = lines.filter((l) => l.level >= 40 && /could not remove the run container/.test(l.msg));
    assert.equal(failed.length, 1, `the failure was logged once: ${JSON.stringify(lines)}`);
  } finally {
    removals.stop();
    await engine.close();
  }
});

test("a run container whose removal failed is removed when the next job starts, before its retry is due", async () => {
  const docker = await awayAtRemoval("removal-next-job", 1);
  const engine = new DockerEngine(docker.path, { callTimeoutMs: 10_000 });
  const { logger } = recordingLogger();
  // A retry due long after the test: only the next job's start can remove it in time.
  const removals = new ContainerRemovals(engine, logger, { firstDelayMs: 600_000, maxDelayMs: 600_000 });
  const job = containerJob(engine, jobAssignment(), join(dir, "next-job"), removals, logger);
  try {
    await runAndClose(job, docker.followed);
    assert.equal(docker.removals(), 1);
    await removals.sweep();
    assert.equal(docker.removals(), 2);
    assert.equal(
      await within(
        docker.removed.then(() => "removed"),
        1_000,
      ),
      "removed",
    );
  } finally {
    removals.stop();
    await engine.close();
  }
});
