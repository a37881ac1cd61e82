import { routes } from "@drover/protocol";
import type { Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { io } from "../io.js";

export function registerTokenCommands(program: Command): void {
  const token = program.command("token").description("Pool tokens (agents register with them)");
  withCommon(token.command("create").description("Create a pool token; it is shown once"))
    .requiredOption("--pool <pool>", "pool name or id")
    .option("--description <text>", "what the token is for", "")
    .action(async (opts: CommonOptions & { pool: string; description: string }) => {
      const created = await apiFor(opts).call(routes.createPoolToken, {
        params: { pool: opts.pool },
        body: { description: opts.description },
      });
      // The token alone on stdout, so `> pool-token` makes a token file; the advice goes to stderr.
      emit(opts, created, (t) => t.token);
      if (!opts.json)
        io().stderr.write(
          `This pool token (id ${created.id}) is shown once. Save it to a file (mode 0600) and start an agent with:\n` +
            `  drover agent run --token-file <file>\n`,
        );
    });
  withCommon(token.command("list").description("List a pool's tokens"))
    .requiredOption("--pool <pool>", "pool name or id")
    .action(async (opts: CommonOptions & { pool: string }) => {
      const { items } = await apiFor(opts).call(routes.listPoolTokens, { params: { pool: opts.pool } });
      emit(opts, items, (ts) =>
        table(
          ["ID", "DESCRIPTION", "CREATED", "LAST USED", "REVOKED"],
          ts.map((t) => [t.id, t.description, t.createdAt, t.lastUsedAt ?? "-", t.revokedAt ?? "-"]),
        ),
      );
    });
  withCommon(token.command("revoke <tokenId>").description("Revoke a pool token; its agents stop")).action(
    async (tokenId: string, opts: CommonOptions) => {
      const revoked = await apiFor(opts).call(routes.revokePoolToken, { params: { id: tokenId } });
      emit(opts, revoked, (t) => `Revoked pool token ${t.id}`);
    },
  );
}
