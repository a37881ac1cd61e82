import type { Command } from "commander";
import { registerLoginCommand } from "./login.js";
import { registerOutputCommand } from "./output.js";
import { registerPoolCommands } from "./pool.js";
import { registerRunCommands } from "./run.js";
import { registerTokenCommands } from "./token.js";
import { registerUserTokenCommands } from "./user-token.js";
import { registerVcsCommands } from "./vcs.js";
import { registerWorkspaceCommands } from "./workspace.js";

/** User commands: login, pool, token, user-token, workspace, vcs, run, output. */
export function registerUserCommands(program: Command): void {
  registerLoginCommand(program);
  registerPoolCommands(program);
  registerTokenCommands(program);
  registerUserTokenCommands(program);
  registerWorkspaceCommands(program);
  registerVcsCommands(program);
  registerRunCommands(program);
  registerOutputCommand(program);
}
