import { maxUserTokenDays, routes, settingParsers } from "@drover/protocol";
import type { Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { io } from "../io.js";

/** `drover user-token create|list|revoke`: API tokens for people and scripts. */
export function registerUserTokenCommands(program: Command): void {
  const cmd = program.command("user-token").description("API tokens for people and scripts");
  withCommon(cmd.command("create").description("Create an API token; it is shown once"))
    .requiredOption("--description <text>", "who or what uses it")
    .option("--expires-in-days <n>", `stop working after this many days, 1 to ${maxUserTokenDays} (default: never)`)
    .action(async (opts: CommonOptions & { description: string; expiresInDays?: string }) => {
      const json = {
        description: opts.description,
        ...(opts.expiresInDays !== undefined
          ? { expiresInDays: settingParsers.intIn(1, maxUserTokenDays)(opts.expiresInDays, "--expires-in-days") }
          : {}),
      };
      const created = await apiFor(opts).call(routes.createUserToken, { body: json });
      // The token alone on stdout, so `> file` makes a token file `login --token-file` reads; the advice goes to stderr.
      emit(opts, created, (t) => t.token);
      if (!opts.json)
        io().stderr.write(
          `This API token (id ${created.id}${created.expiresAt ? `, expires ${created.expiresAt}` : ""}) is shown once. ` +
            `Save it to a file (mode 0600) and use it with:\n  drover login --url <server> --token-file <file>\n`,
        );
    });
  withCommon(cmd.command("list").description("List API tokens (never their secrets)")).action(
    async (opts: CommonOptions) => {
      const { items } = await apiFor(opts).call(routes.listUserTokens, {});
      emit(opts, items, (ts) =>
        table(
          ["ID", "DESCRIPTION", "CREATED", "EXPIRES", "REVOKED"],
          ts.map((t) => [t.id, t.description, t.createdAt, t.expiresAt ?? "never", t.revokedAt ?? "-"]),
        ),
      );
    },
  );
  withCommon(cmd.command("revoke <tokenId>").description("Revoke an API token at once")).action(
    async (tokenId: string, opts: CommonOptions) => {
      const revoked = await apiFor(opts).call(routes.revokeUserToken, { params: { id: tokenId } });
      emit(opts, revoked, (t) => `Revoked API token ${t.id}`);
    },
  );
}
