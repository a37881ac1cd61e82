import { DroverError, escapeControlChars, routes, type Run, type VcsProvider } from "@drover/protocol";
import { Option, type Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { readSecret } from "../secret-input.js";

/** A run's commit in one line (short sha and the message's first line), or "" for an upload. */
export function commitOf(run: Pick<Run, "source">): string {
  return run.source ? `${run.source.commitSha.slice(0, 8)} ${escapeControlChars(run.source.message)}` : "";
}

export function registerVcsCommands(program: Command): void {
  const vcs = program.command("vcs").description("VCS connections: where linked workspaces get their configuration");
  withCommon(vcs.command("connect <name>").description("Connect a GitHub or GitLab by token (stored write-only)"))
    .addOption(new Option("--provider <provider>", "the VCS").choices(["github", "gitlab"]).makeOptionMandatory())
    // Not --url: every command's --url is the Drover server's.
    .requiredOption("--vcs-url <base>", "web/git base URL, e.g. https://github.com or https://gitlab.example.com")
    .option("--token-file <path>", "read the token from this file")
    .option("--token-stdin", "read the token from standard input")
    .option(
      "--via-pool <pool>",
      "reach the VCS through this pool's VCS agents (a pool of kind vcs); the token may then stay with them",
    )
    .action(
      async (
        name: string,
        opts: CommonOptions & {
          provider: VcsProvider;
          vcsUrl: string;
          tokenFile?: string;
          tokenStdin?: boolean;
          viaPool?: string;
        },
      ) => {
        const given = opts.tokenFile !== undefined || opts.tokenStdin === true;
        if ((opts.tokenFile !== undefined && opts.tokenStdin === true) || (!given && opts.viaPool === undefined))
          throw new DroverError(
            "bad_request",
            "give the token with --token-file <path> or --token-stdin (one of them), or none with --via-pool",
          );
        const token = given ? await readSecret(opts.tokenStdin ? "-" : (opts.tokenFile ?? "-"), "token") : undefined;
        const created = await apiFor(opts).call(routes.createVcsConnection, {
          body: { name, provider: opts.provider, url: opts.vcsUrl, token, viaPool: opts.viaPool },
        });
        const via = (pool: string | null) => (pool ? ` through VCS agent pool ${pool}` : "");
        emit(opts, created, (c) => `Connected ${c.provider} ${c.url} as ${c.name} (${c.id})${via(c.viaPool)}`);
      },
    );
  withCommon(vcs.command("list").description("List VCS connections")).action(async (opts: CommonOptions) => {
    const { items } = await apiFor(opts).call(routes.listVcsConnections, {});
    emit(opts, items, (cs) =>
      table(
        ["NAME", "PROVIDER", "URL", "VIA POOL", "ID"],
        cs.map((c) => [c.name, c.provider, c.url, c.viaPool ?? "-", c.id]),
      ),
    );
  });
  withCommon(vcs.command("delete <name>").description("Delete a VCS connection no workspace is linked through")).action(
    async (name: string, opts: CommonOptions) => {
      await apiFor(opts).call(routes.deleteVcsConnection, { params: { connection: name } });
      emit(opts, { deleted: name }, () => `Deleted VCS connection ${name}`);
    },
  );
}

/** `workspace link` and `workspace unlink`. */
export function registerWorkspaceLinkCommands(ws: Command): void {
  withCommon(ws.command("link <workspace>").description("Run the workspace from a repository branch's new commits"))
    .requiredOption("--vcs <connection>", "VCS connection (drover vcs list)")
    .requiredOption("--repo <path>", "owner/name (GitHub) or group/…/project (GitLab)")
    .requiredOption("--branch <branch>", "branch whose new commits start runs")
    .option(
      "--trigger <glob>",
      "run only for commits changing a file that matches this glob, or one in the working directory (repeatable)",
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .action(
      async (name: string, opts: CommonOptions & { vcs: string; repo: string; branch: string; trigger: string[] }) => {
        const link = await apiFor(opts).call(routes.linkWorkspaceVcs, {
          params: { ws: name },
          body: { connection: opts.vcs, repository: opts.repo, branch: opts.branch, triggerPaths: opts.trigger },
        });
        emit(
          opts,
          link,
          (l) =>
            `Linked workspace ${name} to ${l.repository} (${l.branch}) through ${l.connection}: new commits start runs`,
        );
      },
    );
  withCommon(ws.command("unlink <workspace>").description("Stop running the workspace from its repository")).action(
    async (name: string, opts: CommonOptions) => {
      await apiFor(opts).call(routes.unlinkWorkspaceVcs, { params: { ws: name } });
      emit(opts, { unlinked: name }, () => `Unlinked workspace ${name} from its repository`);
    },
  );
}
