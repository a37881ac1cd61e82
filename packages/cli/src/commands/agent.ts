import type { Command } from "commander";

/** `drover agent run|controller|worker` — filled in by the agent work. */
export function registerAgentCommands(program: Command): void {
  program.command("agent").description("Run a Drover agent");
}
