import { DroverError } from "@drover/protocol";
import { Option } from "commander";
import { io } from "./io.js";

/*
 * One way to name a workspace in every command: `-w, --workspace <name-or-id>`. Commands whose
 * subject is the workspace (`workspace show/update/delete/set-var/delete-var`) also take it as
 * their first argument, as before.
 */

export const workspaceFlagHelp = "workspace name or id (every command that acts on a workspace takes -w)";

/** The `-w, --workspace` option. */
export function workspaceOption(help = workspaceFlagHelp): Option {
  return new Option("-w, --workspace <workspace>", help);
}

/** A usage error: printed like any error, but exit 2, as a bad flag is. */
export function usageError(message: string, hint?: string): DroverError {
  io().exitCode = 2;
  return new DroverError("bad_request", message, hint === undefined ? undefined : { hint });
}

/** The workspace a command names, by its argument or -w (the same one, if both). */
export function workspaceOf(command: string, positional: string | undefined, flag: string | undefined): string {
  if (positional !== undefined && flag !== undefined && positional !== flag)
    throw usageError(`two workspaces named: ${JSON.stringify(positional)} and -w ${JSON.stringify(flag)}`);
  const ws = flag ?? positional;
  if (ws === undefined)
    throw usageError("which workspace?", `Name it: drover ${command} <workspace>, or -w <workspace>.`);
  return ws;
}

/**
 * Arguments of a command shaped `[workspace] <x>` that also takes -w: with -w, `x` is the only
 * argument. `what` names `x` in errors (`KEY=VALUE`).
 */
export function workspaceAndArg(
  command: string,
  what: string,
  first: string | undefined,
  second: string | undefined,
  flag: string | undefined,
): { workspace: string; arg: string } {
  const usage = `drover ${command} <workspace> ${what}, or -w <workspace> ${what}`;
  if (first === undefined) throw usageError(`no ${what} given`, `Give it: ${usage}.`);
  if (second === undefined) {
    // One argument without -w: the workspace or the variable, whichever the user forgot.
    if (flag === undefined)
      throw usageError(
        `one argument, ${JSON.stringify(first)}: give the workspace and ${what}`,
        `Give both: ${usage}.`,
      );
    return { workspace: flag, arg: first };
  }
  return { workspace: workspaceOf(command, first, flag), arg: second };
}
