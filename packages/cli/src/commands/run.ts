import {
  awaitsConfirmation,
  DroverError,
  escapeControlChars,
  firstSentence,
  isTerminalRun,
  maxPageSize,
  messageOf,
  routes,
  settingParsers,
  type Phase,
  type Run,
  type Workspace,
} from "@drover/protocol";
import { configurationFiles, configurationFileSuffixes, type DroverClient } from "@drover/runtime";
import { InvalidArgumentError, Option, type Command } from "commander";
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { apiFor, emit, jsonText, table, withCommon, type CommonOptions } from "../command-kit.js";
import { exitCodeFor } from "../exit-codes.js";
import { io } from "../io.js";
import { followRun, type Reconnect } from "../follow.js";
import { resolveReconnectMs } from "../settings.js";
import { printPhaseLog, TextSink } from "../logs.js";
import { packDirectory } from "../pack.js";
import { usageError, workspaceOption } from "../workspace-arg.js";
import { commitOf } from "./vcs.js";

const collect = (value: string, previous: string[]) => [...previous, value];

/** The plan options of a run, one line each, for `run show`. */
const planOptionLines = (r: Run): string[] => [
  ...(r.savedPlan ? ["Saved plan: applies only by `terraform apply` of the plan file it was saved to"] : []),
  ...(r.isDestroy ? ["Destroy: plans to destroy every resource the workspace manages"] : []),
  ...(r.refreshOnly ? ["Refresh-only: updates the state to match the real resources, changes nothing"] : []),
  ...(r.refresh ? [] : ["No refresh: plans from the stored state without reading the real resources"]),
  ...(r.targets.length > 0 ? [`Targets: ${r.targets.join(", ")}`] : []),
  ...(r.replaces.length > 0 ? [`Replaces: ${r.replaces.join(", ")}`] : []),
];

/** Whether a run's message is its commit's first line, which the commit's line already shows. */
const messageIsCommits = (r: Run): boolean =>
  r.source !== null && r.message.split("\n", 1)[0] === r.source.message.split("\n", 1)[0];

/** Why the run was started and whether it may apply, one line each, for `run show`. */
const purposeLines = (r: Run): string[] => [
  // A message of several lines keeps them, indented under its first.
  ...(r.message && !messageIsCommits(r) ? [`Message: ${escapeControlChars(r.message).replace(/\n/g, "\n  ")}`] : []),
  ...(r.planOnly ? ["Plan only: plans, never applies"] : []),
];

/**
 * A run's message for `run list`: its first line, cut to a column's width, after "(plan only)"
 * for such a run; not when the COMMIT column already shows it (a run of a linked repository).
 */
function listedMessage(r: Run): string {
  const shown = messageIsCommits(r) ? "" : (r.message.split("\n", 1)[0] ?? "");
  const cut = shown.length > 40 ? `${shown.slice(0, 39)}…` : shown;
  return escapeControlChars([r.planOnly ? "(plan only)" : "", cut].filter(Boolean).join(" "));
}

/** What `run logs` says of a run whose plan waits for someone to confirm or discard it. */
const waitsForConfirmation = (id: string, planLogShown: boolean) =>
  `drover: run ${id} waits for confirmation: its plan is done and no apply starts until it is confirmed. ` +
  `Apply it with \`drover run confirm ${id}\`, or drop it with \`drover run discard ${id}\`` +
  (planLogShown ? "" : `; its plan: \`drover run logs ${id} --phase plan\``) +
  ".\n";

/** Parses a whole-number flag within [min, max]: a bad value is a usage error (exit 2), before any request. */
const wholeNumberIn =
  (flag: string, min: number, max: number) =>
  (raw: string): number => {
    try {
      return settingParsers.intIn(min, max)(raw, flag);
    } catch (err) {
      throw new InvalidArgumentError(messageOf(err));
    }
  };

// The error message is the agent's text: escaped again here, so a message stored before the
// server escaped them cannot drive the terminal either.
// A message the followed log already ended with (the agent's last line quotes its first
// sentence, terraform's error block precedes it) is not printed a second time.
const summary = (r: Run, shownLog = "") =>
  `Run ${r.id}: ${r.status}${r.planSummary ? ` (plan: ${r.planSummary.add} to add, ${r.planSummary.change} to change, ${r.planSummary.destroy} to destroy)` : ""}${r.errorMessage && !shownLog.includes(escapeControlChars(firstSentence(r.errorMessage))) ? `\n${escapeControlChars(r.errorMessage)}` : ""}`;

/**
 * Refuses a directory with no configuration file where the workspace runs terraform: such a run
 * would plan to destroy everything the workspace manages (a wrong path, a missed checkout).
 */
function refuseWithoutConfiguration(dir: string, workingDirectory: string): void {
  const where = join(dir, workingDirectory);
  if (!existsSync(where))
    throw new DroverError(
      "bad_request",
      where === dir
        ? `${dir} does not exist`
        : `${where} does not exist: the workspace runs terraform in ${workingDirectory} of the directory given`,
      { hint: "Give the configuration's directory." },
    );
  const names = statSync(where).isDirectory() ? readdirSync(where) : [];
  if (configurationFiles(names, "").length === 0)
    throw new DroverError(
      "bad_request",
      `no ${configurationFileSuffixes.join(", ")} file in ${where}: nothing to plan (a run of it would destroy what the workspace manages)`,
      { hint: "Give the configuration's directory (with --destroy to destroy what it manages)." },
    );
}

/** Refuses a path that does not exist, or is a file (`./infra/main.tf`): the run takes its directory. */
function refuseNonDirectory(dir: string): void {
  if (!existsSync(dir))
    throw new DroverError("bad_request", `${dir} does not exist`, { hint: "Give the configuration's directory." });
  if (!statSync(dir).isDirectory())
    throw new DroverError("bad_request", `${dir} is not a directory: run start takes the configuration's directory`, {
      hint: `Give its directory: drover run start ${dirname(dir)} …`,
    });
}

/**
 * Says on stderr when no agent of the workspace's pool is online: the run would otherwise wait
 * without a word (a pool an autoscaler scales to zero starts one on its own).
 */
async function warnWithoutAgents(api: DroverClient, ws: Workspace): Promise<void> {
  const { items } = await api.call(routes.listAgents, { query: { pool: ws.poolId } });
  if (items.some((a) => a.status !== "offline")) return;
  io().stderr.write(
    `drover: no agent of pool ${ws.poolName} is online (${items.length} registered): the run waits until one takes it. ` +
      `Unless an autoscaler starts one, start an agent with a token of the pool: ` +
      `drover token create --pool ${ws.poolName} > pool-token; drover agent run --token-file pool-token\n`,
  );
}

/** The run's page in the web UI, served by the server the CLI talks to. */
export function runLink(baseUrl: string, workspace: string, runId: string): string {
  return `${baseUrl}/app/workspaces/${encodeURIComponent(workspace)}/runs/${encodeURIComponent(runId)}`;
}

/** How a follow of this command rides out a server restart: notices on stderr, for DROVER_CLIENT_RECONNECT_SECONDS. */
const reconnectOf = (): Reconnect => ({ forMs: resolveReconnectMs(io().env), notices: io().stderr });

/** Follows a run (logs to stdout, or stderr with --json), prints its end, sets the exit code. */
async function followAndReport(
  api: DroverClient,
  run: Run,
  opts: CommonOptions & { follow?: boolean },
  phases?: Phase[],
): Promise<void> {
  let final = run;
  // The log's end, where the agent's outcome line is.
  let tail = Buffer.alloc(0);
  if (opts.follow !== false)
    final = await followRun(api, run.id, opts.json ? io().stderr : io().stdout, reconnectOf(), phases, (text) => {
      tail = Buffer.concat([tail, text]).subarray(-16_384);
    });
  if (opts.json) io().stdout.write(jsonText(final) + "\n");
  else
    io().stdout.write(
      `\n${escapeControlChars(summary(final, tail.toString("utf8")))}${final.status === "planned" ? `\nConfirm with: drover run confirm ${final.id}` : ""}\n`,
    );
  io().exitCode = opts.follow === false ? 0 : exitCodeFor(final.status);
}

export function registerRunCommands(program: Command): void {
  const run = program.command("run").description("Runs: plan, apply, destroy");
  withCommon(run.command("start <dir>").description("Upload a directory and start a run, following its log"))
    .addOption(workspaceOption().makeOptionMandatory())
    .option("--auto-apply", "apply without confirmation")
    .option("--destroy", "plan to destroy everything")
    .option(
      "--allow-destroy-all",
      "with auto-apply, apply even a plan that destroys every resource the workspace manages " +
        "(held otherwise, unless the workspace allows it)",
    )
    .option("--no-allow-destroy-all", "hold such a plan for confirmation even when the workspace allows it")
    .option("--plan-only", "plan, never apply")
    .option("--target <address>", "plan only this resource or module and what it depends on (repeatable)", collect, [])
    .option("--replace <address>", "plan to replace this resource (repeatable)", collect, [])
    .option("--refresh-only", "only update the state to match the real resources")
    .option("--no-refresh", "plan from the stored state without reading the real resources first (-refresh=false)")
    .option("--message <text>", "why this run", "")
    .option("--no-follow", "return once the run is created")
    .action(
      async (
        dir: string,
        opts: CommonOptions & {
          workspace: string;
          autoApply?: boolean;
          destroy?: boolean;
          planOnly?: boolean;
          allowDestroyAll?: boolean;
          target: string[];
          replace: string[];
          refreshOnly?: boolean;
          refresh: boolean;
          message: string;
          follow?: boolean;
        },
      ) => {
        if (opts.planOnly && opts.autoApply)
          throw usageError("--plan-only never applies and --auto-apply applies without confirmation: give one of them");
        refuseNonDirectory(resolve(dir));
        const api = apiFor(opts);
        const ws = await api.call(routes.getWorkspace, { params: { ws: opts.workspace } });
        refuseWithoutConfiguration(resolve(dir), ws.workingDirectory);
        const archive = await packDirectory(resolve(dir));
        const cv = await api.call(routes.uploadConfiguration, { params: { ws: opts.workspace }, body: archive });
        const created = await api.call(routes.createRun, {
          body: {
            workspace: opts.workspace,
            configurationVersionId: cv.id,
            planOnly: opts.planOnly === true,
            isDestroy: opts.destroy === true,
            // Unsaid, the workspace's setting decides.
            ...(opts.allowDestroyAll === undefined ? {} : { allowDestroyAll: opts.allowDestroyAll }),
            targets: opts.target,
            replaces: opts.replace,
            refreshOnly: opts.refreshOnly === true,
            refresh: opts.refresh,
            message: opts.message,
            ...(opts.autoApply ? { autoApply: true } : {}),
          },
        });
        if (!opts.json)
          io().stdout.write(
            `Run ${created.id} created (${created.status})${opts.follow !== false ? "; following its log" : ""}.\n` +
              `In the browser: ${runLink(api.baseUrl, opts.workspace, created.id)}\n\n`,
          );
        await warnWithoutAgents(api, ws);
        // Not followed, the line above said all there is; --json still prints the run.
        if (opts.follow === false && !opts.json) return;
        await followAndReport(api, created, opts);
      },
    );
  withCommon(run.command("confirm <runId>").description("Apply a planned run, following the apply log"))
    .option("--no-follow", "return at once")
    .action(async (id: string, opts: CommonOptions & { follow?: boolean }) => {
      const api = apiFor(opts);
      const confirmed = await api.call(routes.confirmRun, { params: { id } });
      await followAndReport(api, confirmed, opts, ["apply"]);
    });
  withCommon(run.command("discard <runId>").description("Discard a planned run")).action(
    async (id: string, opts: CommonOptions) => {
      emit(opts, await apiFor(opts).call(routes.discardRun, { params: { id } }), (x) => summary(x));
    },
  );
  withCommon(run.command("cancel <runId>").description("Cancel a run"))
    .option(
      "--force",
      "end the job on the server now, without waiting for the agent: its token stops working and its state lock is released",
    )
    .action(async (id: string, opts: CommonOptions & { force?: boolean }) => {
      const r = await apiFor(opts).call(routes.cancelRun, {
        params: { id },
        query: opts.force ? { force: "true" } : {},
      });
      // Any end the lifecycle table calls terminal (the run may have applied or errored before the cancel reached it) is reported as it is.
      emit(opts, r, (x) =>
        x.cancelRequested && !isTerminalRun(x.status)
          ? `Cancel requested for run ${x.id}; the agent is stopping it`
          : summary(x),
      );
    });
  withCommon(run.command("show <runId>").description("Show a run")).action(async (id: string, opts: CommonOptions) => {
    const api = apiFor(opts);
    const r = await api.call(routes.getRun, { params: { id } });
    const { items: jobs } = await api.call(routes.listRunJobs, { params: { id } });
    emit(opts, { ...r, jobs }, (d) =>
      [
        summary(d),
        `Workspace: ${d.workspaceName}`,
        `Created: ${d.createdAt}`,
        ...purposeLines(d),
        ...planOptionLines(d),
        ...(d.source ? [`commit ${commitOf(d)} (${d.source.repository} ${d.source.branch}, ${d.source.author})`] : []),
        "",
        table(
          ["PHASE", "JOB", "STATUS", "ATTEMPT", "AGENT"],
          d.jobs.map((j) => [j.phase, j.id, j.status, String(j.attempt), j.agentName ?? j.agentId ?? "-"]),
        ),
      ].join("\n"),
    );
  });
  withCommon(run.command("list").description("List runs"))
    .addOption(workspaceOption("only this workspace (name or id)"))
    .option(`--limit <n>`, `how many, 1 to ${maxPageSize}`, wholeNumberIn("--limit", 1, maxPageSize), 20)
    .action(async (opts: CommonOptions & { workspace?: string; limit: number }) => {
      const query = { limit: opts.limit, ...(opts.workspace ? { workspace: opts.workspace } : {}) };
      const api = apiFor(opts);
      const { items } = await api.call(routes.listRuns, { query });
      const rows = items.map((r) => [
        r.id,
        r.workspaceName,
        r.status,
        r.createdAt,
        commitOf(r) || "-",
        listedMessage(r) || "-",
      ]);
      emit(opts, items, () => table(["RUN", "WORKSPACE", "STATUS", "CREATED", "COMMIT", "MESSAGE"], rows));
    });
  withCommon(run.command("logs <runId>").description("Print a run's logs (plan, then apply), every byte stored so far"))
    .option("--follow", "keep printing as the run goes on, until it settles")
    .addOption(new Option("--phase <phase>", "only this phase's log").choices(["plan", "apply"]))
    .action(async (id: string, opts: CommonOptions & { follow?: boolean; phase?: Phase }) => {
      const api = apiFor(opts);
      const phases: Phase[] = opts.phase ? [opts.phase] : ["plan", "apply"];
      // A follow ends as `run start` would for the same run: its exit code is the run's outcome.
      if (opts.json) {
        const { logs, final } = await logsAsData(api, id, phases, opts.follow === true);
        emit(opts, { runId: id, logs }, () => "");
        if (final) io().exitCode = exitCodeFor(final.status);
        return;
      }
      if (opts.follow) {
        const final = await followRun(api, id, io().stdout, reconnectOf(), phases);
        if (awaitsConfirmation(final.status)) io().stderr.write(waitsForConfirmation(id, phases.includes("plan")));
        io().exitCode = exitCodeFor(final.status);
        return;
      }
      for (const phase of phases) {
        const read = await printPhaseLog(api, id, phase, io().stdout);
        if (read.complete) continue;
        // No apply log until someone confirms the plan: say that, not that the log is unfinished.
        const waiting =
          phase === "apply" &&
          read.bytes === 0 &&
          awaitsConfirmation((await api.call(routes.getRun, { params: { id } })).status);
        // Not an error: the job is still writing (or not started); say so where scripts won't parse it.
        io().stderr.write(
          waiting
            ? waitsForConfirmation(id, phases.includes("plan"))
            : `drover: the ${phase} log of run ${id} is not finished yet (${read.bytes} bytes so far); use --follow to keep reading\n`,
        );
      }
    });
}

/**
 * The phases' logs as data for --json: each as stored now, or with `follow` once the run has
 * settled (then each is complete, but an apply that may still come).
 */
async function logsAsData(
  api: DroverClient,
  id: string,
  phases: Phase[],
  follow: boolean,
): Promise<{ logs: { phase: Phase; complete: boolean; text: string }[]; final?: Run }> {
  const logs: { phase: Phase; complete: boolean; text: string }[] = [];
  let final: Run | undefined;
  for (const phase of phases) {
    const text = new TextSink();
    let complete: boolean;
    if (follow) {
      final = await followRun(api, id, text, reconnectOf(), [phase]);
      // Complete, but an apply that may still come (a run waiting for its confirmation).
      complete = phase === "plan" || isTerminalRun(final.status);
    } else complete = (await printPhaseLog(api, id, phase, text)).complete;
    logs.push({ phase, complete, text: text.text() });
  }
  return final ? { logs, final } : { logs };
}
