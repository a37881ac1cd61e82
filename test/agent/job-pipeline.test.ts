import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { pino } from "pino";
import { JobRun, type JobApi, type JobSettings, type Runner } from "@drover/agent";
import { DroverError, type JobAssignment, type JobOutcome, type JobVariable } from "@drover/protocol";
import { type RunTracer, type SpanHandle } from "@drover/runtime";
import { rawTarGz } from "../support/archives.js";
import { jobAssignment } from "../support/job-assignment.js";

// The job pipeline's orchestration against a recording runner (no processes) and a recording
// job API (no server): which stages run, in what order, and what ends them. The real steps
// against real terraform are the e2e tests' subject.

const dataDir = mkdtempSync(join(tmpdir(), "drover-pipeline-"));
after(() => rmSync(dataDir, { recursive: true, force: true }));

const configuration = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "n" {}\n' }]);
const state = JSON.stringify({ version: 4, outputs: { greeting: { value: "hi", type: "string" } } });

const settings: JobSettings = {
  name: "pipeline-test",
  dataDir,
  cacheDir: join(dataDir, "cache"),
  stopAction: "graceful",
  taskCaCertPath: undefined,
  hooksDir: undefined,
  hookTimeoutMs: 10_000,
  token: undefined,
};

interface Script {
  /** Exit code and output of a step, by its first argument (init, plan, apply); unset: 0 and nothing. */
  steps?: Record<string, { code: number; output?: string }>;
  /** Called as the variables are fetched, the engine is found, or the plan file is uploaded. */
  onVariables?(run: JobRun): void | Promise<void>;
  onEngine?(run: JobRun): void | Promise<void>;
  onUploadPlan?(signal: AbortSignal | undefined, loseLease: () => void): Promise<void>;
}

/** Runs one job through a recording runner and job API; resolves with what happened, in order. */
async function runJob(assignment: JobAssignment, script: Script = {}) {
  const events: string[] = [];
  const spans: Array<{ name: string; error?: string | undefined }> = [];
  const log: Buffer[] = [];
  const finished: Array<{ outcome: JobOutcome; message: string | null }> = [];
  let loseLease: (err: unknown) => void = () => undefined;
  const heartbeats: Array<{ waitMs: number; timeoutMs: number | undefined }> = [];
  const api: JobApi = {
    start: async () => "planning",
    heartbeat: (waitMs, signal, timeoutMs) =>
      new Promise((_resolve, reject) => {
        heartbeats.push({ waitMs, timeoutMs });
        loseLease = reject;
        signal?.addEventListener("abort", () => reject(new Error("job over")), { once: true });
      }),
    configuration: async () => configuration,
    variables: async () => {
      events.push("variables");
      await script.onVariables?.(run);
      const variables: JobVariable[] = [{ key: "secret", value: "hunter2", kind: "env", sensitive: true, hcl: false }];
      return variables;
    },
    appendLog: async (offset, data) => {
      log.push(data);
      return offset + data.length;
    },
    uploadPlan: async (_file, signal) => {
      events.push("upload plan");
      await script.onUploadPlan?.(signal, () =>
        loseLease(new DroverError("stale_attempt", "a newer attempt holds the job")),
      );
    },
    uploadPlanJson: async () => void events.push("upload plan JSON"),
    uploadProviderSchemas: async () => void events.push("upload provider schemas"),
    downloadPlan: async () => {
      events.push("download plan");
      return Buffer.from("plan");
    },
    state: async () => Buffer.from(state),
    uploadOutputs: async (outputs) => void events.push(`upload outputs ${outputs.map((o) => o.name).join(",")}`),
    finish: async (outcome, message) => {
      events.push(`finish ${outcome}`);
      finished.push({ outcome, message });
    },
  };
  const runner: Runner = {
    engine: async () => {
      await script.onEngine?.(run);
      return { path: "/fake/terraform", version: "1.9.0" };
    },
    start: (_command, args, options) => {
      const name = args[0] ?? "";
      events.push(`step ${name}`);
      const out = args.find((a) => a.startsWith("-out="));
      if (out) writeFileSync(out.slice("-out=".length), "plan");
      const { code, output } = script.steps?.[name] ?? { code: 0 };
      return {
        signal: (sig) => events.push(`signal ${sig}`),
        done: Promise.resolve().then(() => {
          if (output) options.onOutput(Buffer.from(output));
          return { code, signal: null };
        }),
      };
    },
    capture: async (_command, args) => {
      events.push(`capture ${args.slice(0, 2).join(" ")}`);
      const { code } = script.steps?.[args[0] ?? ""] ?? { code: 0 };
      const stdout = args[0] === "providers" ? '{"format_version":"1.0","provider_schemas":{}}' : "{}";
      return { code, stdout: Buffer.from(code === 0 ? stdout : "") };
    },
  };
  // An agent of the time before one plan-JSON path ran steps side by side and might be told to
  // leave the JSON to the apply job: neither changes what this pipeline does.
  Object.assign(runner, { parallelSteps: true });
  const planJson = assignment.phase === "plan" ? "plan-unless-changes" : "apply";
  Object.assign(assignment, { planJson });
  const tracer: RunTracer = {
    start: (name) => {
      const span: { name: string; error?: string | undefined } = { name };
      const handle: SpanHandle = { end: (_a, error) => void (span.error = error), traceparent: () => "" };
      spans.push(span);
      return handle;
    },
  };
  const run: JobRun = new JobRun({
    assignment,
    client: { baseUrl: "http://server.invalid", job: () => api },
    settings: { ...settings, tracer },
    logger: pino({ level: "silent" }),
    runner,
  });
  await run.execute();
  return {
    events,
    stages: spans.map((s) => s.name).filter((n) => !n.startsWith("agent ") && n !== "claimed" && n !== "finish"),
    spans,
    finished,
    heartbeats,
    log: Buffer.concat(log).toString("utf8"),
  };
}

test("a heartbeat lost on the way is given up within half the lease, so the one sent after it still renews it", async () => {
  for (const leaseTtlMs of [8_000, 60_000]) {
    const r = await runJob({ ...jobAssignment("plan"), leaseTtlMs });
    const [first] = r.heartbeats;
    assert.ok(first, "a heartbeat was sent");
    assert.ok(first.waitMs <= leaseTtlMs / 4, `wait ${first.waitMs} ms of a ${leaseTtlMs} ms lease`);
    assert.ok(
      first.timeoutMs !== undefined && first.timeoutMs <= leaseTtlMs / 2,
      `deadline ${first.timeoutMs} ms of a ${leaseTtlMs} ms lease`,
    );
  }
});

test("a plan job runs its stages in order, renders the plan JSON and uploads it before it finishes", async () => {
  const r = await runJob(jobAssignment("plan"), { steps: { plan: { code: 2 } } });
  assert.deepEqual(r.stages, ["fetch", "engine", "extract", "caches", "init", "plan", "uploads"]);
  assert.deepEqual(
    r.events.filter((e) => e !== "variables"),
    ["step init", "step plan", "upload plan", "capture show -json", "upload plan JSON", "finish succeeded"],
  );
  assert.ok(
    r.spans.every((s) => s.error === undefined),
    JSON.stringify(r.spans),
  );
});

test("a saved plan's job also uploads the providers' schemas; their failure is a log line, not the run's", async () => {
  const saved = { ...jobAssignment("plan"), providerSchemas: true };
  const r = await runJob(saved, { steps: { plan: { code: 2 } } });
  assert.deepEqual(r.events.filter((e) => e !== "variables").slice(-4), [
    "upload plan JSON",
    "capture providers schema",
    "upload provider schemas",
    "finish succeeded",
  ]);
  const failing = await runJob(
    { ...jobAssignment("plan"), providerSchemas: true },
    { steps: { plan: { code: 2 }, providers: { code: 1 } } },
  );
  assert.ok(!failing.events.includes("upload provider schemas"), failing.events.join("\n"));
  assert.deepEqual(failing.finished, [{ outcome: "succeeded", message: null }]);
  assert.match(failing.log, /\[drover\] the providers' schemas are not stored/);
});

test("an apply job never renders the plan JSON: it applies, reads the outputs and uploads them", async () => {
  const r = await runJob(jobAssignment("apply"));
  assert.deepEqual(r.stages, ["fetch", "engine", "extract", "caches", "init", "apply", "outputs", "uploads"]);
  assert.deepEqual(
    r.events.filter((e) => e !== "variables"),
    ["download plan", "step init", "step apply", "upload outputs greeting", "finish succeeded"],
  );
});

test("a stage that fails ends the job there: no later stage runs, and the failure names the stage", async () => {
  const r = await runJob(jobAssignment("plan"), { steps: { init: { code: 1, output: "Error: no such provider\n" } } });
  assert.deepEqual(r.stages, ["fetch", "engine", "extract", "caches", "init"]);
  assert.ok(!r.events.includes("step plan"), r.events.join("\n"));
  assert.deepEqual(r.finished, [{ outcome: "failed", message: "Error: no such provider" }]);
  assert.match(r.log, /\[drover\] plan failed in stage init after [0-9.]+ s: Error: no such provider/);
  assert.equal(r.spans.find((s) => s.name === "init")?.error, "Error: no such provider");
  assert.equal(r.spans.find((s) => s.name === "agent plan")?.error, "Error: no such provider");
});

test("a cancel that arrives during a stage lets no further stage start", async () => {
  const r = await runJob(jobAssignment("plan"), { onVariables: (run) => run.cancel() });
  assert.deepEqual(r.stages, ["fetch"]);
  assert.ok(!r.events.some((e) => e.startsWith("step ")), r.events.join("\n"));
  assert.deepEqual(r.finished, [{ outcome: "canceled", message: "canceled by request" }]);
  assert.match(r.log, /\[drover\] plan canceled before stage engine after [0-9.]+ s: canceled by request/);
});

test("an agent stop between stages lets no further stage start", async () => {
  const r = await runJob(jobAssignment("apply"), {
    onEngine: async (run) => {
      run.stop({ continueMs: 0, firstSignal: "SIGTERM", killAfterMs: 60_000, budgetMs: 60_000 }, "graceful");
      // The stop acts on a timer of 0 ms: one set after it runs after it.
      await new Promise((resolve) => setTimeout(resolve, 0));
    },
  });
  assert.deepEqual(r.stages, ["fetch", "engine"]);
  assert.ok(!r.events.some((e) => e.startsWith("step ")), r.events.join("\n"));
  assert.deepEqual(r.finished, [{ outcome: "errored", message: "agent stopped (graceful stop) while the apply ran" }]);
  assert.match(r.log, /agent stopped \(graceful stop\): interrupting terraform/);
});

test("a lease lost during the uploads stops the job: the upload ends, nothing more is sent, no outcome is reported", async () => {
  const r = await runJob(jobAssignment("plan"), {
    onUploadPlan: (signal, loseLease) =>
      new Promise((_resolve, reject) => {
        signal?.addEventListener("abort", () => reject(new Error("upload aborted")), { once: true });
        loseLease();
      }),
  });
  assert.deepEqual(r.stages, ["fetch", "engine", "extract", "caches", "init", "plan", "uploads"]);
  assert.ok(r.events.includes("upload plan"));
  assert.ok(!r.events.includes("upload plan JSON"), r.events.join("\n"));
  assert.deepEqual(r.finished, [], "a job whose lease is lost reports no outcome");
  assert.ok(r.spans.find((s) => s.name === "uploads")?.error, "the uploads stage ended failed");
});
