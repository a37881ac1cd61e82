import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { pino } from "pino";
import { JobRun, type JobApi, type JobSettings } from "@drover/agent";
import { ContainerJob, DockerEngine } from "@drover/agent/docker";
import type { JobAssignment, JobOutcome } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { within } from "../support/poll.js";

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
let jobs = 0;

/** One plan job's assignment, its workspace without a runner image of its own. */
function assignment(): JobAssignment {
  jobs++;
  return {
    jobId: `job-${jobs}`,
    attempt: 1,
    jobToken: `token-${jobs}`,
    phase: "plan",
    runId: `run-${jobs}`,
    planOnly: false,
    isDestroy: false,
    targets: [],
    replaces: [],
    refreshOnly: false,
    refresh: true,
    providerSchemas: false,
    workspace: {
      id: "ws",
      name: "ws",
      engine: "terraform",
      engineVersion: null,
      workingDirectory: "",
      runnerImage: null,
    },
    configurationVersionId: "cv",
    statePath: "/state/ws",
    leaseTtlMs: 60_000,
  };
}

/** A job's container against the daemon at `socketPath`, its data below this file's directory. */
function containerJob(engine: DockerEngine, a: JobAssignment, dataDir: string): ContainerJob {
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
    log: pino({ level: "silent" }),
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
  const a = assignment();
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
