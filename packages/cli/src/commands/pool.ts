import { routes } from "@drover/protocol";
import type { Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";

export function registerPoolCommands(program: Command): void {
  const pool = program.command("pool").description("Agent pools");
  withCommon(pool.command("create <name>").description("Create a pool")).action(
    async (name: string, opts: CommonOptions) => {
      const created = await apiFor(opts).call(routes.createPool, { body: { name } });
      emit(opts, created, (p) => `Created pool ${p.name} (${p.id})`);
    },
  );
  withCommon(pool.command("list").description("List pools")).action(async (opts: CommonOptions) => {
    const { items } = await apiFor(opts).call(routes.listPools, {});
    emit(opts, items, (ps) =>
      table(
        ["NAME", "AGENTS (ONLINE/TOTAL)", "ID", "CREATED"],
        ps.map((p) => [p.name, `${p.agents.online}/${p.agents.total}`, p.id, p.createdAt]),
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
