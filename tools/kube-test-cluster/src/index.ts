export { startTestCluster } from "./cluster.js";
export type { ClusterTimings, NodeOptions, TestCluster, TestClusterOptions } from "./cluster.js";
export type { ImageConfig } from "./node/images.js";
export type { Isolation } from "./node/container-process.js";
export { annotationEvictAfterMs, annotationOomKill } from "./node/pod-worker.js";
export { trackingFinalizer } from "./controllers/job-controller.js";
export type { KObject, ObjectMeta, OwnerReference } from "./api/types.js";
