/** The version this agent reports when it registers (and the node worker beside its controller). */
export const agentVersion = "0.1.0";
