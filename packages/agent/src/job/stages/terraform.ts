import { DroverError, messageOf, type Output } from "@drover/protocol";
import { containsSecret } from "@drover/runtime";
import type { JobContext } from "../context.js";
import type { EngineBinary } from "../engine.js";
import type { Stage } from "../pipeline.js";
import { PlanLineScanner, planSucceededCodes, summaryOfPlanOutput } from "../plan-summary.js";
import { outputsOfState } from "../state-outputs.js";
import { hookPath } from "./prepare.js";
import { StepFailed } from "../steps.js";
import { tfvarsFiles, varFileArgs } from "../tfvars.js";

/** The engine binary the engine stage found. */
function binaryOf(c: JobContext): EngineBinary {
  if (!c.binary) throw new Error("no engine: the engine stage did not run");
  return c.binary;
}

/** A hook of DROVER_AGENT_HOOKS_DIR as a stage of its own; it runs only when its file is there. */
export function hook(name: string, after?: Stage): Stage {
  return {
    name: `hook ${name}`,
    retries: "nothing",
    when: (c) => (after?.when?.(c) ?? true) && hookPath(c, name) !== undefined,
    async run(c) {
      const path = hookPath(c, name);
      if (path) await c.steps.hook(name, path, c.workDir, c.env);
    },
  };
}

export const init: Stage = {
  name: "init",
  retries: "nothing",
  when: (c) => !c.reused,
  async run(c) {
    await c.steps.step(binaryOf(c), ["init", "-input=false", "-no-color"], c.workDir, c.env);
  },
};

/** `plan -detailed-exitcode`: exit 2 is a plan with changes, terraform's own verdict, which the server decides from. */
export const plan: Stage = {
  name: "plan",
  retries: "nothing",
  async run(c) {
    const planLine = new PlanLineScanner();
    const args = ["plan", "-input=false", "-no-color", "-detailed-exitcode", `-out=${c.planPath}`];
    if (c.assignment.isDestroy) args.push("-destroy");
    // A plan-only run goes beside the workspace's queue, maybe while another run applies: it reads
    // the state without taking the lock that run holds.
    if (c.assignment.planOnly) args.push("-lock=false");
    // One argument each, `-flag=value`: the assignment's schema already refused an address that
    // is not one, and even then a value glued to its flag can never be read as a flag of its own.
    if (c.assignment.refreshOnly) args.push("-refresh-only");
    if (!c.assignment.refresh) args.push("-refresh=false");
    for (const t of c.assignment.targets) args.push(`-target=${t}`);
    for (const r of c.assignment.replaces) args.push(`-replace=${r}`);
    // The files stage extract wrote; the plan is the one step that reads variables (an apply
    // applies the plan file, and a saved plan keeps the values it was made with).
    args.push(...varFileArgs(tfvarsFiles(c.variables)));
    const code = await c.steps
      .step(binaryOf(c), args, c.workDir, c.env, planSucceededCodes, (chunk) => planLine.push(chunk))
      .catch((err: unknown) => {
        throw withVariableHint(c, err);
      });
    c.planSummary = summaryOfPlanOutput(code, planLine.end());
  },
};

/**
 * Terraform's advice for a missing variable is a command-line flag no Drover user passes: the
 * failure also says how to set it on the workspace.
 */
function withVariableHint(c: JobContext, err: unknown): unknown {
  if (!(err instanceof StepFailed)) return err;
  const names = [...err.output.matchAll(/The root module input variable "([^"]+)" is not set/g)].map((m) => m[1]);
  if (names.length === 0) return err;
  const ws = c.assignment.workspace.name;
  const hint = [...new Set(names)]
    .map((n) => `[drover] set ${n} with: drover workspace set-var ${ws} ${n}=…`)
    .join("\n");
  c.log.line(hint);
  return new StepFailed(`${err.message}\n\n${hint}`, err.output);
}

export const apply: Stage = {
  name: "apply",
  retries: "nothing",
  async run(c) {
    await c.steps.step(binaryOf(c), ["apply", "-input=false", "-no-color", c.planPath], c.workDir, c.env);
  },
};

/** The outputs of the state the apply just wrote, masked with the run's secrets. */
export const outputs: Stage = {
  name: "outputs",
  retries: "server calls",
  async run(c) {
    // Reading the state spares starting terraform; `output -json` reads what the agent cannot (an encrypted state).
    const state = await c.job.state(c.assignment.statePath, c.signal);
    const outputs = outputsOfState(state) ?? (await engineOutputs(c));
    // An output built from a sensitive value is sensitive, whatever the configuration declares.
    c.outputs = outputs.map((o) =>
      !o.sensitive && containsSecret(o.value, c.secrets) ? { ...o, sensitive: true } : o,
    );
  },
};

function notApplyable(planJson: Buffer): boolean {
  try {
    return (JSON.parse(planJson.toString("utf8")) as { applyable?: unknown }).applyable === false;
  } catch {
    return false;
  }
}

/** `terraform output -json`, for states the agent cannot read itself. */
async function engineOutputs(c: JobContext): Promise<Output[]> {
  const out = await c.steps.capture(binaryOf(c), ["output", "-json"], c.workDir, c.env);
  const parsed = JSON.parse(out.toString("utf8") || "{}") as Record<
    string,
    { sensitive?: boolean; type?: unknown; value?: unknown }
  >;
  return Object.entries(parsed).map(([name, o]) => ({
    name,
    sensitive: o.sensitive === true,
    type: o.type ?? null,
    value: o.value ?? null,
  }));
}

/**
 * A plan job's plan file and its JSON (`show -json`, which readers and the run's next steps
 * read before the run is planned); an apply job's outputs.
 */
export const uploads: Stage = {
  name: "uploads",
  retries: "server calls",
  async run(c, retry) {
    if (c.assignment.phase === "apply") {
      const outputs = c.outputs ?? [];
      await retry((signal) => c.job.uploadOutputs(outputs, signal));
      return;
    }
    // The plan file travels while terraform renders the plan as JSON; if `show` fails, the
    // job's end aborts the upload, and its failure is not the run's.
    const planFile = c.job.uploadPlan(c.files.read(c.planPath), c.signal);
    planFile.catch(() => undefined);
    const json = await c.steps.capture(binaryOf(c), ["show", "-json", c.planPath], c.workDir, c.env);
    // Exit code 2 of a refresh-only plan may be a change terraform will not apply (an output it
    // drops): its own `applyable` decides. Such plans list no resource changes, so parsing is cheap.
    if (c.assignment.refreshOnly && c.planSummary && notApplyable(json))
      c.planSummary = { ...c.planSummary, hasChanges: false };
    await planFile;
    try {
      await c.job.uploadPlanJson(json, c.signal);
    } catch (err) {
      // Larger than the server stores (DROVER_MAX_PLAN_JSON_MB): the run goes on without it,
      // its counts from terraform's summary line; a plan too large to show is still a plan.
      if (!(err instanceof DroverError && err.code === "payload_too_large")) throw err;
      c.log.line(`[drover] the plan's JSON is not stored: ${err.message}`);
    }
    if (c.assignment.providerSchemas) await uploadProviderSchemas(c);
  },
};

/**
 * A saved cloud plan's providers' schemas, which the human `terraform show` of it renders with.
 * Without them only that command fails, so a failure here is a log line, not the run's failure.
 */
async function uploadProviderSchemas(c: JobContext): Promise<void> {
  try {
    const output = await c.steps.capture(binaryOf(c), ["providers", "schema", "-json"], c.workDir, c.env);
    const doc = JSON.parse(output.toString("utf8")) as { format_version?: unknown; provider_schemas?: unknown };
    // The server puts them beside the plan as format 1 (terraform's renderer reads 1.x).
    if (typeof doc.format_version !== "string" || !doc.format_version.startsWith("1."))
      throw new Error(`providers schema -json gave format ${JSON.stringify(doc.format_version)}, not 1.x`);
    const schemas = Buffer.from(JSON.stringify(doc.provider_schemas ?? {}));
    await c.job.uploadProviderSchemas(schemas, c.signal);
  } catch (err) {
    if (c.signal.aborted) throw err;
    c.log.line(
      `[drover] the providers' schemas are not stored (\`terraform show\` of this saved plan will fail): ${messageOf(err)}`,
    );
  }
}
