import { maxPageSize, routes } from "@drover/protocol";
import type { DroverClient } from "@drover/runtime";
import type { Command } from "commander";
import { apiFor, emit, withCommon, type CommonOptions } from "../command-kit.js";
import { usageError, workspaceOf, workspaceOption } from "../workspace-arg.js";

async function countRuns(api: DroverClient, ws: string): Promise<number> {
  let count = 0;
  let after: string | undefined;
  do {
    const page = await api.call(routes.listRuns, {
      query: { workspace: ws, limit: maxPageSize, ...(after ? { after } : {}) },
    });
    count += page.items.length;
    after = page.next ?? undefined;
  } while (after);
  return count;
}

/** `workspace delete`: the state goes with it, so it asks for --yes and says what went. */
export function registerWorkspaceDelete(ws: Command): void {
  withCommon(
    ws
      .command("delete [workspace]")
      .description("Delete a workspace with its runs, state versions and variables (asks for --yes); -w names it too"),
  )
    .addOption(workspaceOption())
    .option("--yes", "delete: its state versions cannot be recovered")
    .action(async (given: string | undefined, opts: CommonOptions & { workspace?: string; yes?: boolean }) => {
      const name = workspaceOf("workspace delete", given, opts.workspace);
      const api = apiFor(opts);
      const w = await api.call(routes.getWorkspace, { params: { ws: name } });
      const [states, vars, runs] = await Promise.all([
        api.call(routes.listStateVersions, { params: { ws: w.id } }),
        api.call(routes.listVariables, { params: { ws: w.id } }),
        countRuns(api, w.id),
      ]);
      const what = `${runs} run(s), ${states.items.length} state version(s) and ${vars.items.length} variable(s)`;
      if (!opts.yes)
        throw usageError(
          `deleting workspace ${w.name} (${w.id}) deletes its ${what}; nothing was deleted`,
          `To delete it: drover workspace delete ${w.name} --yes`,
        );
      await api.call(routes.deleteWorkspace, { params: { ws: w.id } });
      emit(
        opts,
        { deleted: { id: w.id, name: w.name }, runs, stateVersions: states.items.length, variables: vars.items.length },
        () => `Deleted workspace ${w.name} (${w.id}) with its ${what}`,
      );
    });
}
