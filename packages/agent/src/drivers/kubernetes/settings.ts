import { settings, type SettingsSource } from "@drover/protocol";
import { existsSync, readFileSync } from "node:fs";

/** Where the drover image keeps the exec-loop script. */
export const defaultExecLoopPath = settings.DROVER_AGENT_EXEC_LOOP_PATH.default;

/** DROVER_AGENT_KUBERNETES_NAMESPACE, else the pod's own namespace, else "default". */
export function podNamespace(src: SettingsSource): string {
  const saNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  return (
    src.get("DROVER_AGENT_KUBERNETES_NAMESPACE") ??
    (existsSync(saNamespace) ? readFileSync(saNamespace, "utf8").trim() : "default")
  );
}
