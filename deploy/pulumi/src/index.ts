export { DroverAgent, validateArgs, type AgentMode, type DroverAgentArgs, type ShutdownMode } from "./agent.js";
export { strategicMerge } from "./strategic-merge.js";
