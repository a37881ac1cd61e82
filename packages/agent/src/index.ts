export { Agent, agentVersion, FatalAgentError, runAgent, type AgentState } from "./agent.js";
export { AgentClient, JobClient, NetworkError } from "./client.js";
export { loadAgentConfig, stopPlan, type AgentConfig, type AgentFlags, type StopAction } from "./config.js";
export { extractConfiguration } from "./extract.js";
export { createLogger } from "./logger.js";
export { LogStream } from "./log-stream.js";
export { StreamRedactor } from "./redactor.js";
export { errorExcerpt } from "./job.js";
