import { routes } from "@drover/protocol";
import type { Command } from "commander";
import { workspaceOption } from "../workspace-arg.js";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";

export function registerOutputCommand(program: Command): void {
  withCommon(program.command("output").description("Outputs of a workspace's current state"))
    .addOption(workspaceOption().makeOptionMandatory())
    .option("--reveal", "show sensitive values too (hidden otherwise: <sensitive>, or null with --json)")
    .action(async (opts: CommonOptions & { workspace: string; reveal?: boolean }) => {
      const { items } = await apiFor(opts).call(routes.workspaceOutputs, {
        params: { ws: opts.workspace },
        query: { reveal: opts.reveal === true ? "true" : "false" },
      });
      emit(opts, items, (os) =>
        table(
          ["NAME", "VALUE"],
          os.map((o) => [o.name, o.sensitive && opts.reveal !== true ? "<sensitive>" : JSON.stringify(o.value)]),
        ),
      );
    });
}
