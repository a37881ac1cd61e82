import type { Command } from "commander";
import { registerLoginCommand } from "./login.js";
import { registerOutputCommand } from "./output.js";
import { registerPoolCommands } from "./pool.js";
import { registerRunCommands } from "./run.js";
import { registerTokenCommands } from "./token.js";
import { registerUserTokenCommands } from "./user-token.js";
import { registerWorkspaceCommands } from "./workspace.js";

/** User commands: login, pool, token, user-token, workspace, run, output. */
export function registerUserCommands(program: Command): void {
  registerLoginCommand(program);
  registerPoolCommands(program);
  registerTokenCommands(program);
  registerUserTokenCommands(program);
  registerWorkspaceCommands(program);
  registerRunCommands(program);
  registerOutputCommand(program);
}
