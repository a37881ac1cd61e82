import { Command, CommanderError } from "commander";
import { registerServerCommand } from "./commands/server.js";
import { registerAgentCommands } from "./commands/agent.js";
import { registerUserCommands } from "./commands/user.js";
import { registerQuickstartCommand } from "./commands/quickstart.js";
import { DroverError } from "@drover/protocol";
import { printError } from "./output.js";
import { warnUnknownSettings } from "./settings-errors.js";

/** The one `drover` binary: server, agent and user commands. */
export function buildProgram(): Command {
  const program = new Command("drover")
    .description("Run Terraform and OpenTofu on self-hosted agents")
    .version("0.1.0")
    .showHelpAfterError()
    .exitOverride();
  registerServerCommand(program);
  registerAgentCommands(program);
  registerUserCommands(program);
  registerQuickstartCommand(program);
  return program;
}

/** Parses the command line and runs the command; sets the exit code. */
export async function main(): Promise<void> {
  warnUnknownSettings(process.env);
  try {
    await buildProgram().parseAsync(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode === 0 ? 0 : 2;
      return;
    }
    printError(err);
    // A bad setting is a usage error, like a bad flag: exit 2, as the agent and server do.
    const code = err instanceof DroverError && err.code === "invalid_setting" ? 2 : 1;
    process.exitCode = process.exitCode && process.exitCode !== 0 ? process.exitCode : code;
  }
}
