import { renameSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

// The agent's side of the pod-annotator (pod-annotator.ts): kept apart so an agent loads
// nothing of the sidecar's Kubernetes client.

/** What the agent publishes in its status file. */
export interface AgentStatus {
  runningJobs: number;
  state: string;
}

/** Writes the agent's status atomically (write, then rename), so a reader never sees half a file. */
export function writeAgentStatus(path: string, status: AgentStatus): void {
  const tmp = join(dirname(path), `.${basename(path)}.tmp`);
  writeFileSync(tmp, JSON.stringify(status));
  renameSync(tmp, path);
}
