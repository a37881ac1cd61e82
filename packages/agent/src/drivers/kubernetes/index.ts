// Kubernetes job mode, a separate entry point: the local agent never loads the Kubernetes client.
export { Controller, runController } from "./controller.js";
export { loadControllerSettings, type ControllerSettings } from "./controller-settings.js";
export { buildJob, jobName } from "./job-spec.js";
export { describePodFailure } from "./pod-failures.js";
export { ExecLoopRunner } from "../../runners/exec-loop.js";
export { loadWorkerSettings, runWorker } from "./worker.js";
export { loadNodeWorkerSettings, NodeWorker, runNodeWorker } from "./node-worker.js";
export { exponentialBackoff, KeyedWorkQueue, type WorkQueueOptions } from "./work-queue.js";
