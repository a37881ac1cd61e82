import type { Command } from "commander";

/** User commands: login, pool, token, workspace, run, output. */
export function registerUserCommands(_program: Command): void {}
