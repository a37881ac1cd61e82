// The docker driver's parts, for tests and embedders (the agent itself imports them directly).
export { ContainerJob } from "../../runners/container.js";
export { dockerLabels, jobsDirName, runnerImageFor } from "./container-spec.js";
export { StreamDemuxer } from "./demux.js";
export { DiskWatch, diskUsage } from "./disk-watch.js";
export { DockerApiError, DockerEngine } from "./engine-api.js";
export { cgroupOomKills, memoryEventsFile } from "./oom.js";
export { reapDockerOrphans, restartedReason } from "./orphans.js";
export { ContainerRemovals, type RemovalRetry } from "./removals.js";
