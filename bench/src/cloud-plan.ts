import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { routes } from "@drover/protocol";
import { startAgentProc } from "./agent-runs.js";
import { adminToken, api, startServerProc } from "./harness.js";
import { median, type Figure } from "./report.js";

/*
 * `terraform plan` through the cloud block (a remote speculative run on a Drover agent: the
 * configuration uploaded, planned by the agent, its log streamed back) against the same plan
 * run locally with its state on Drover's `http` backend, on one server, alternating.
 */

const reps = 5;
const bench = "cloud-block plan (5 terraform_data, plan from empty state)";
const hostname = "drover.bench";
const main = Array.from({ length: 5 }, (_, i) => `resource "terraform_data" "r${i}" { input = "${i}" }\n`).join("");

function terraform(args: string[], cwd: string, env: NodeJS.ProcessEnv, okCodes = [0]): number {
  const started = Date.now();
  const r = spawnSync("terraform", args, { cwd, env, encoding: "utf8" });
  if (!okCodes.includes(r.status ?? -1))
    throw new Error(`terraform ${args.join(" ")} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return Date.now() - started;
}

/**
 * terraform 1.11's cloud backend sleeps 500 ms before it first reads the uploaded configuration
 * version's status and 1000 ms before its first run poll (`internal/cloud/backend_plan.go`,
 * `backend_common.go`): no server answers sooner than that.
 */
const terraformOwnWaitsMs = 1500;

/** Medians over the measured cloud runs: queue to plan start, and the plan job itself. */
async function droverShare(url: string): Promise<{ dispatch: number; plan: number }> {
  const runs = (await api(url, routes.listRuns, { query: { workspace: "bench-cloud", limit: reps } })).items;
  const dispatch: number[] = [];
  const plan: number[] = [];
  for (const run of runs) {
    const job = (await api(url, routes.listRunJobs, { params: { id: run.id } })).items.find((j) => j.phase === "plan");
    if (!job?.startedAt || !job.finishedAt) continue;
    dispatch.push(Date.parse(job.startedAt) - Date.parse(run.createdAt));
    plan.push(Date.parse(job.finishedAt) - Date.parse(job.startedAt));
  }
  return { dispatch: median(dispatch), plan: median(plan) };
}

export async function benchCloudPlan(): Promise<Figure[]> {
  const server = await startServerProc({ DROVER_TFE_ORGANIZATION: "acme", DROVER_TFE_POOL: "cloud" });
  await api(server.url, routes.createPool, { body: { name: "cloud" } });
  const agent = await startAgentProc(server, "cloud", "bench-agent");
  const root = mkdtempSync(join(tmpdir(), "drover-bench-cloud-"));
  try {
    const tfrc = join(root, "cli.tfrc");
    const tfe = `${server.url}/api/v2/`;
    writeFileSync(
      tfrc,
      `host "${hostname}" {\n  services = { "tfe.v2" = "${tfe}", "tfe.v2.1" = "${tfe}" }\n}\n` +
        `credentials "${hostname}" { token = "${adminToken}" }\n`,
    );
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: root,
      TF_CLI_CONFIG_FILE: tfrc,
      CHECKPOINT_DISABLE: "1",
      TF_IN_AUTOMATION: "1",
    };
    delete env.TF_INPUT;
    mkdirSync(join(root, ".terraform.d"));

    const cloudDir = join(root, "cloud");
    mkdirSync(cloudDir);
    writeFileSync(join(cloudDir, "main.tf"), main);
    writeFileSync(
      join(cloudDir, "cloud.tf"),
      `terraform {\n  cloud {\n    hostname = "${hostname}"\n    organization = "acme"\n    workspaces { name = "bench-cloud" }\n  }\n}\n`,
    );
    const httpDir = join(root, "http");
    mkdirSync(httpDir);
    writeFileSync(join(httpDir, "main.tf"), main);
    writeFileSync(join(httpDir, "backend.tf"), 'terraform {\n  backend "http" {}\n}\n');
    await api(server.url, routes.createWorkspace, { body: { name: "bench-http", pool: "cloud" } });
    const stateUrl = `${server.url}${routes.readState.path.replace(":ws", "bench-http")}`;
    const httpEnv: NodeJS.ProcessEnv = {
      ...env,
      TF_HTTP_ADDRESS: stateUrl,
      TF_HTTP_LOCK_ADDRESS: stateUrl,
      TF_HTTP_UNLOCK_ADDRESS: stateUrl,
      TF_HTTP_LOCK_METHOD: "LOCK",
      TF_HTTP_UNLOCK_METHOD: "UNLOCK",
      TF_HTTP_USERNAME: "drover",
      TF_HTTP_PASSWORD: adminToken,
    };
    terraform(["init", "-input=false", "-no-color"], cloudDir, env);
    terraform(["init", "-input=false", "-no-color"], httpDir, httpEnv);
    // One plan each first, unmeasured: the agent's engine and the page cache are warm for both sides.
    const plan = ["plan", "-input=false", "-no-color", "-detailed-exitcode"];
    terraform(plan, cloudDir, env, [2]);
    terraform(plan, httpDir, httpEnv, [2]);

    const cloud: number[] = [];
    const local: number[] = [];
    for (let i = 0; i < reps; i++) {
      local.push(terraform(plan, httpDir, httpEnv, [2]));
      cloud.push(terraform(plan, cloudDir, env, [2]));
    }
    const extra = median(cloud) - median(local);
    const drover = await droverShare(server.url);
    return [
      {
        bench,
        metric: "terraform plan wall time, median of 5",
        unit: "ms",
        value: median(cloud),
        baseline: median(local),
        baselineLabel: "local plan, http backend",
        target: "≤ +1000 ms",
        met: extra <= 1000,
        note:
          `cloud block: ${cloud.join(", ")} ms; local with the http backend: ${local.join(", ")} ms; ` +
          `difference of medians ${extra} ms, of which ${terraformOwnWaitsMs} ms terraform's own fixed waits; ` +
          `on the server, median of the measured runs: run created → agent starts the plan ${drover.dispatch} ms, ` +
          `the agent's plan (init, plan, uploads) ${drover.plan} ms`,
      },
    ];
  } finally {
    await agent.stop();
    await server.stop();
    rmSync(root, { recursive: true, force: true });
  }
}
