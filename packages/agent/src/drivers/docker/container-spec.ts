import { DroverError, imageAllowed, isImageReference, type JobAssignment } from "@drover/protocol";
import { join } from "node:path";
import type { DockerSettings } from "../../config.js";
import type { ContainerCreate } from "./engine-api.js";

/** Labels on every run container; `agentTag` finds a restarted agent's orphans. */
export const dockerLabels = {
  agentTag: "drover.dev/agent-tag",
  agent: "drover.dev/agent",
  runId: "drover.dev/run-id",
  jobId: "drover.dev/job-id",
  attempt: "drover.dev/attempt",
  phase: "drover.dev/phase",
  workspaceId: "drover.dev/workspace-id",
} as const;

/** Where the run container sees its directories: the agent's paths are rewritten to these. */
export const inContainer = {
  exec: "/drover/exec",
  run: "/drover/run",
  bin: "/drover/bin",
  ca: "/drover/ca/ca.pem",
  hooks: "/drover/hooks",
  engine: "/drover/engine",
};

/** What the agent keeps of a job outside the container's reach, so a restarted agent can end its run. */
export interface JobRecord {
  url: string;
  jobId: string;
  attempt: number;
  runId: string;
  jobToken: string;
  container: string;
}

/**
 * The image a job's container starts from: its workspace's `runnerImage` when the agent's
 * allow-list (DROVER_AGENT_DOCKER_ALLOWED_IMAGES) has it, else the agent's own. A workspace
 * naming an image the operator did not allow is refused rather than silently given the
 * default: its configuration may depend on what that image holds.
 */
export function runnerImageFor(
  settings: Pick<DockerSettings, "image" | "allowedImages">,
  workspace: JobAssignment["workspace"],
): string {
  const wanted = workspace.runnerImage;
  if (wanted === null || wanted === settings.image) return settings.image;
  // The server validates it too; the agent does not lean on that for what it hands the daemon.
  if (!isImageReference(wanted))
    throw new DroverError(
      "forbidden",
      `workspace ${workspace.name} names the runner image ${JSON.stringify(wanted)}, which is not an image reference`,
    );
  if (!imageAllowed(wanted, settings.allowedImages)) {
    throw new DroverError(
      "forbidden",
      `workspace ${workspace.name} asks for the runner image ${wanted}, which this agent does not allow. Add it (or a prefix ending in '*') to the agent's DROVER_AGENT_DOCKER_ALLOWED_IMAGES, or clear the workspace's runner image to use the agent's own (${settings.image})`,
    );
  }
  return wanted;
}

/** The directory of the docker driver's per-job directories in the data dir. */
export const jobsDirName = "docker-jobs";

/** What a job's container is made of. */
export interface ContainerSpecOptions {
  settings: DockerSettings;
  assignment: JobAssignment;
  /** The runner image (see runnerImageFor). */
  image: string;
  /** The job's directory, and its `run` directory (the job's data dir). */
  dir: string;
  runBase: string;
  agentName: string;
  agentTag: string;
  taskCaCertPath: string | undefined;
  hooksDir: string | undefined;
  /** The directory of the agent's engine release the steps run, when the agent provides it. */
  engineDir: string | undefined;
}

/**
 * The run container: the agent's exec-loop as entrypoint, the job's directories bind-mounted,
 * a read-only root, no capabilities, and the driver's memory, CPU and process bounds.
 */
export function containerSpec(o: ContainerSpecOptions): ContainerCreate {
  const s = o.settings;
  const a = o.assignment;
  const binds = [
    `${join(o.dir, "exec")}:${inContainer.exec}:rw`,
    `${o.runBase}:${inContainer.run}:rw`,
    `${join(o.dir, "bin")}:${inContainer.bin}:ro`,
  ];
  if (o.taskCaCertPath) binds.push(`${o.taskCaCertPath}:${inContainer.ca}:ro`);
  if (o.hooksDir) binds.push(`${o.hooksDir}:${inContainer.hooks}:ro`);
  // The release's own directory in the agent's cache (already read-only files), mounted read-only.
  if (o.engineDir) binds.push(`${o.engineDir}:${inContainer.engine}:ro`);
  return {
    Image: o.image,
    // The agent's own exec-loop, whatever the image's entrypoint: it always speaks this agent's protocol.
    Entrypoint: ["/bin/sh", `${inContainer.bin}/exec-loop.sh`],
    Cmd: [],
    User: `${s.user.uid}:${s.user.gid}`,
    Env: [`DROVER_EXEC_DIR=${inContainer.exec}`, "HOME=/tmp", "TMPDIR=/tmp"],
    WorkingDir: inContainer.run,
    Labels: {
      [dockerLabels.agentTag]: o.agentTag,
      [dockerLabels.agent]: o.agentName,
      [dockerLabels.runId]: a.runId,
      [dockerLabels.jobId]: a.jobId,
      [dockerLabels.attempt]: String(a.attempt),
      [dockerLabels.phase]: a.phase,
      [dockerLabels.workspaceId]: a.workspace.id,
    },
    HostConfig: {
      Binds: binds,
      Tmpfs: { "/tmp": "rw,nosuid,nodev,size=512m" },
      ReadonlyRootfs: true,
      NetworkMode: s.network,
      ...(s.memoryBytes > 0 ? { Memory: s.memoryBytes, MemorySwap: s.memoryBytes } : {}),
      ...(s.nanoCpus > 0 ? { NanoCpus: s.nanoCpus } : {}),
      PidsLimit: 4096,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      AutoRemove: false,
    },
  };
}
