import type { JobAssignment } from "@drover/protocol";

let made = 0;

/** A job assignment of a minimal terraform workspace, with ids of its own each call: what the agent's job code is given. */
export function jobAssignment(phase: "plan" | "apply" = "plan"): JobAssignment {
  made++;
  return {
    jobId: `job-${made}`,
    attempt: 1,
    jobToken: `token-${made}`,
    phase,
    runId: `run-${made}`,
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
