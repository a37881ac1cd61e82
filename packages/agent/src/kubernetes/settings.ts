import { DroverError } from "@drover/protocol";
import { existsSync, readFileSync } from "node:fs";

/** Where the drover image keeps the exec-loop script. */
export const defaultExecLoopPath = "/opt/drover/packages/agent/exec-loop/exec-loop.sh";

/** DROVER_AGENT_KUBERNETES_NAMESPACE, else the pod's own namespace, else "default". */
export function podNamespace(env: NodeJS.ProcessEnv): string {
  const saNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  return env.DROVER_AGENT_KUBERNETES_NAMESPACE || (existsSync(saNamespace) ? readFileSync(saNamespace, "utf8").trim() : "default");
}

/** DROVER_AGENT_NODE_HOME, the nodes' hostPath data home: an absolute path without a trailing slash. */
export function nodeHomeSetting(raw: string | undefined): string | undefined {
  if (!raw) return undefined;
  if (!raw.startsWith("/")) throw new DroverError("bad_request", `DROVER_AGENT_NODE_HOME must be an absolute path (the nodes' hostPath data home), got ${JSON.stringify(raw)}`);
  return raw.replace(/\/+$/, "");
}
