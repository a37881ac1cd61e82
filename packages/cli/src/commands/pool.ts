import { routes, type PoolKind } from "@drover/protocol";
import { Option, type Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";

export function registerPoolCommands(program: Command): void {
  const pool = program.command("pool").description("Agent pools");
  withCommon(pool.command("create <name>").description("Create a pool"))
    .addOption(
      new Option("--kind <kind>", "runs: agents run jobs; vcs: VCS agents relay a VCS the server cannot reach")
        .choices(["runs", "vcs"])
        .default("runs"),
    )
    .action(async (name: string, opts: CommonOptions & { kind: PoolKind }) => {
      const created = await apiFor(opts).call(routes.createPool, { body: { name, kind: opts.kind } });
      emit(opts, created, (p) => `Created ${p.kind} pool ${p.name} (${p.id})`);
    });
  withCommon(pool.command("show <pool>").description("Show a pool: its kind and id")).action(
    async (name: string, opts: CommonOptions) => {
      const shown = await apiFor(opts).call(routes.getPool, { params: { pool: name } });
      emit(opts, shown, (p) => table(["NAME", "KIND", "ID", "CREATED"], [[p.name, p.kind, p.id, p.createdAt]]));
    },
  );
  withCommon(pool.command("list").description("List pools")).action(async (opts: CommonOptions) => {
    const { items } = await apiFor(opts).call(routes.listPools, {});
    emit(opts, items, (ps) =>
      table(
        ["NAME", "AGENTS (ONLINE/TOTAL)", "ID", "KIND", "CREATED"],
        ps.map((p) => [p.name, `${p.agents.online}/${p.agents.total}`, p.id, p.kind, p.createdAt]),
      ),
    );
  });
  withCommon(
    pool
      .command("delete <pool>")
      .description("Delete a pool no workspace uses: its tokens are revoked and its agents' sessions end"),
  ).action(async (name: string, opts: CommonOptions) => {
    const deleted = await apiFor(opts).call(routes.deletePool, { params: { pool: name } });
    emit(
      opts,
      deleted,
      (p) =>
        `Deleted pool ${p.name} (${p.id}): ${p.tokensRevoked} token(s) revoked, ${p.agentsEnded} agent session(s) ended`,
    );
  });
}
