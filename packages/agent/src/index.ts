export { Agent, agentVersion, FatalAgentError, runAgent, type AgentOptions, type AgentState } from "./agent.js";
export { AgentClient, JobClient, NetworkError, withRetry, type ClientTimeouts } from "./client.js";
export { pause, parseRetryAfter } from "./backoff.js";
export { loadAgentConfig, stopPlan, type AgentConfig, type AgentFlags, type StopAction } from "./config.js";
export { extractConfiguration } from "./extract.js";
export { createLogger } from "./logger.js";
export { LogStream } from "./log-stream.js";
export { StreamRedactor } from "./redactor.js";
export { errorExcerpt } from "./job.js";
