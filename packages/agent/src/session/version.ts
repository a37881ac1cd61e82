import { planJsonBesideApplyCapability } from "@drover/protocol";

export const agentVersion = "0.1.0";

/**
 * What every pool session declares at registration. It honours `planJson` (decision 0041), and so
 * does the Kubernetes controller, whose Jobs run this agent's code with the assignment as given.
 */
export const agentCapabilities = [planJsonBesideApplyCapability];
