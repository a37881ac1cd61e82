import type { JobAssignment } from "@drover/protocol";
import type { AgentConfig } from "../../config.js";
import { KubeApiError } from "./api-errors.js";
import type { ControllerSettings } from "./controller-settings.js";
import { transient, errText, type AgentTask, type ControllerContext } from "./controller-context.js";
import { buildJob, type TaskSettings } from "./job-spec.js";

/** What every Job of this controller is made with, besides its job and its task template. */
export function taskSettings(config: AgentConfig, settings: ControllerSettings): TaskSettings {
  return {
    namespace: settings.namespace,
    controllerName: config.name,
    serverUrl: config.url,
    workerImage: settings.workerImage,
    execLoopPath: settings.execLoopPath,
    stopAction: config.stopAction,
    gracePeriodSeconds: config.gracePeriodMs / 1000,
    activeDeadlineSeconds: settings.activeDeadlineSeconds,
    ttlSecondsAfterFinished: settings.ttlSecondsAfterFinished,
    nodeHome: settings.nodeHome,
    otlp: config.otlp,
  };
}

/** Judges each generation of the AgentTask's Job template, and writes the verdict on it. */
export class TemplateCheck {
  /** The checks in order, and the generation whose Valid condition is written. */
  private checking: Promise<void> = Promise.resolve();
  private checked: number | undefined;

  constructor(private readonly c: ControllerContext) {}

  /**
   * Sets the AgentTask's `Valid` condition (its VALID column) once per generation of its spec: a bad
   * template shows in `kubectl get agenttasks` when it is applied, not only at each run's Job create.
   * The Job it makes for a placeholder job is created with `dryRun=All`, so the API server's own
   * validation and admission judge it. Checks run one at a time, the latest template last.
   */
  check(task: AgentTask): void {
    const generation = task.metadata?.generation;
    if (generation !== undefined && generation === this.checked) return;
    this.checking = this.checking
      .then(() => this.validate(task))
      .catch((err: unknown) => {
        this.c.countError("template_check");
        this.c.log.warn(
          { task: task.metadata?.name, err: errText(err) },
          "could not set the task template's Valid condition",
        );
      });
  }

  private async validate(task: AgentTask): Promise<void> {
    const generation = task.metadata?.generation;
    const name = task.metadata?.name ?? "";
    if (this.c.stop.signal.aborted || (generation !== undefined && generation === this.checked)) return;
    let condition: { status: "True" | "False"; reason: string; message: string };
    const problem = templateProblem(task.spec?.jobTemplate);
    if (problem) {
      condition = { status: "False", reason: "TemplateUnusable", message: problem };
    } else {
      try {
        const body = buildJob(templateCheckJob, task.spec?.jobTemplate, taskSettings(this.c.config, this.c.settings));
        await this.c.batch.createNamespacedJob({ namespace: this.c.settings.namespace, body, dryRun: "All" });
        condition = {
          status: "True",
          reason: "DryRunAccepted",
          message: "the API server accepts the Job this template makes (server-side dry run)",
        };
      } catch (err) {
        // No answer, or the server's own trouble, says nothing about the template: the next change or restart checks again.
        if (!(err instanceof KubeApiError) || transient(err)) throw err;
        condition = {
          status: "False",
          reason: "DryRunRefused",
          message: `the API server refuses the Job this template makes: ${err.apiMessage}`,
        };
      }
    }
    const value = {
      observedGeneration: generation,
      conditions: [
        { type: "Valid", ...condition, lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") },
      ],
    };
    await this.c.custom.patchNamespacedCustomObjectStatus({
      group: "drover.dev",
      version: "v1alpha1",
      namespace: this.c.settings.namespace,
      plural: "agenttasks",
      name,
      body: [{ op: "add", path: "/status", value }],
    });
    this.checked = generation;
    const log = { task: name, generation, valid: condition.status, reason: condition.reason };
    if (condition.status === "True") this.c.log.info(log, "task template valid");
    else
      this.c.log.error(
        { ...log, message: condition.message },
        "task template invalid: runs will fail at Job create until it is fixed",
      );
  }
}

/** The placeholder job a task template's dry-run Job is made for (never created for real). */
const templateCheckJob: JobAssignment = {
  jobId: "template-check",
  attempt: 1,
  jobToken: "",
  phase: "plan",
  runId: "template-check",
  planOnly: true,
  isDestroy: false,
  targets: [],
  replaces: [],
  refreshOnly: false,
  refresh: true,
  providerSchemas: false,
  workspace: {
    id: "template-check",
    name: "template-check",
    engine: "terraform",
    engineVersion: null,
    workingDirectory: "",
    runnerImage: null,
  },
  configurationVersionId: "template-check",
  statePath: "",
  leaseTtlMs: 0,
};

/** Why a jobTemplate cannot be made into a Job at all (the CRD's schema leaves it open), if it cannot. */
function templateProblem(spec: unknown): string | undefined {
  if (spec === undefined) return undefined; // no template: Drover's defaults alone
  if (!isRecord(spec)) return "spec.jobTemplate must be a Job spec (an object)";
  if (!isRecord(spec.template)) return "spec.jobTemplate.template must be a pod template (an object)";
  const pod = spec.template.spec;
  if (pod !== undefined && !isRecord(pod)) return "spec.jobTemplate.template.spec must be a pod spec (an object)";
  for (const list of ["containers", "initContainers", "volumes"]) {
    const v = isRecord(pod) ? pod[list] : undefined;
    if (v !== undefined && (!Array.isArray(v) || !v.every(isRecord)))
      return `spec.jobTemplate.template.spec.${list} must be a list of objects`;
  }
  return undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
