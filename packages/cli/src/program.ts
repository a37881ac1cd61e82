import { Command, CommanderError } from "commander";
import { registerServerCommand } from "./commands/server.js";
import { registerAgentCommands } from "./commands/agent.js";
import { registerUserCommands } from "./commands/user.js";
import { registerQuickstartCommand } from "./commands/quickstart.js";
import { DroverError } from "@drover/protocol";
import { printError } from "./output.js";
import { warnUnknownSettings } from "./settings-errors.js";
import { io, withIo, type CliIo } from "./io.js";
import { guardProcessOutput } from "./stdio.js";

/** The one `drover` binary: server, agent and user commands. */
export function buildProgram(): Command {
  const program = new Command("drover")
    .description("Run Terraform and OpenTofu on self-hosted agents")
    .version("0.1.0")
    .showHelpAfterError()
    .exitOverride()
    .configureOutput({ writeOut: (text) => io().stdout.write(text), writeErr: (text) => io().stderr.write(text) });
  registerServerCommand(program);
  registerAgentCommands(program);
  registerUserCommands(program);
  registerQuickstartCommand(program);
  return program;
}

/** Parses the command line and runs the command; sets the exit code. */
export async function main(): Promise<void> {
  guardProcessOutput();
  await runCli(process.argv.slice(2), io());
}

/**
 * Runs `drover <args>` with `given` as its environment, input and output; resolves with its
 * exit code. User commands run this way beside others in one process (tests do); the server and
 * agent commands own their process and exit it.
 */
export async function runCli(args: string[], given: CliIo): Promise<number> {
  return withIo(given, async () => {
    warnUnknownSettings(given.env);
    try {
      await buildProgram().parseAsync(args, { from: "user" });
    } catch (err) {
      if (err instanceof CommanderError) {
        given.exitCode = err.exitCode === 0 ? 0 : 2;
        return given.exitCode;
      }
      printError(err);
      // A bad setting is a usage error, like a bad flag: exit 2, as the agent and server do.
      const code = err instanceof DroverError && err.code === "invalid_setting" ? 2 : 1;
      given.exitCode = given.exitCode !== 0 ? given.exitCode : code;
    }
    return given.exitCode;
  });
}
