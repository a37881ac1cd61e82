/* `drover agent vcs`: its own entry, so run agents load none of it. */
export { loadVcsAgentConfig, parseVcsConnections, type AgentVcsConnection, type VcsAgentConfig } from "./config.js";
export { checkedTask, runTask, type TaskContext, type TaskEnd } from "./tasks.js";
export { runVcsAgent, VcsAgent, type VcsAgentOptions } from "./vcs-agent.js";
export { startWebhookListener, verifiedDelivery, type Delivery } from "./webhooks.js";
export { DeliverySpool, type DeliverySpoolOptions } from "./delivery-spool.js";
