import { routes } from "@drover/protocol";
import type { Command } from "commander";
import { workspaceOption } from "../workspace-arg.js";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";

export function registerOutputCommand(program: Command): void {
  withCommon(program.command("output").description("Outputs of a workspace's latest apply"))
    .addOption(workspaceOption().makeOptionMandatory())
    .action(async (opts: CommonOptions & { workspace: string }) => {
      const { items } = await apiFor(opts).call(routes.workspaceOutputs, { params: { ws: opts.workspace } });
      emit(opts, items, (os) =>
        table(
          ["NAME", "VALUE"],
          os.map((o) => [o.name, o.sensitive ? "<sensitive>" : JSON.stringify(o.value)]),
        ),
      );
    });
}
