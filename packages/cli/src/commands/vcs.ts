import {
  DroverError,
  escapeControlChars,
  routes,
  type Run,
  type VcsDelivery,
  type VcsProvider,
} from "@drover/protocol";
import { Option, type Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { io } from "../io.js";
import { readSecret } from "../secret-input.js";
import { workspaceOf, workspaceOption } from "../workspace-arg.js";

/** A run's commit in one line (short sha and the message's first line), or "" for an upload. */
export function commitOf(run: Pick<Run, "source">): string {
  return run.source ? `${run.source.commitSha.slice(0, 8)} ${escapeControlChars(run.source.message)}` : "";
}

/** Deliveries as a table, each followed by one line per linked workspace it concerned. */
function deliveriesText(ds: VcsDelivery[]): string {
  if (ds.length === 0) return "No deliveries.";
  const lines: string[] = [];
  for (const d of ds) {
    lines.push(`${d.receivedAt}  ${d.event}  ${d.deliveryId}  ${d.status}`);
    if (d.summary) lines.push(`  ${escapeControlChars(d.summary)}`);
    for (const o of d.outcomes) {
      const why = o.outcome === "started" ? `run ${o.runId ?? ""}` : escapeControlChars(o.detail ?? "");
      lines.push(`  ${o.workspace}: ${o.outcome.replace(/_/g, " ")}${why ? ` (${why})` : ""}`);
    }
  }
  return lines.join("\n");
}

export function registerVcsCommands(program: Command): void {
  const vcs = program.command("vcs").description("VCS connections: where linked workspaces get their configuration");
  withCommon(
    vcs
      .command("connect <name>")
      .description("Connect a GitHub or GitLab by token, or GitHub as a GitHub App (secrets are stored write-only)"),
  )
    .addOption(new Option("--provider <provider>", "the VCS").choices(["github", "gitlab"]).makeOptionMandatory())
    // Not --url: every command's --url is the Drover server's.
    .requiredOption("--vcs-url <base>", "web/git base URL, e.g. https://github.com or https://gitlab.example.com")
    .option(
      "--api-url <base>",
      "REST API base (default: https://api.github.com for https://github.com, else <vcs-url>/api/v3 (GitHub) or <vcs-url>/api/v4 (GitLab))",
    )
    // Not --token-file: every command's --token is the Drover API token, and login's --token-file too.
    .option("--vcs-token-file <path>", "read the GitHub/GitLab token from this file")
    .option("--vcs-token-stdin", "read the GitHub/GitLab token from standard input")
    .option("--app-id <id>", "GitHub App: the app's id")
    .option("--installation-id <id>", "GitHub App: the installation's id on the repositories' owner")
    .option("--private-key-file <path>", "GitHub App: the app's private key (PEM)")
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
          apiUrl?: string;
          vcsTokenFile?: string;
          vcsTokenStdin?: boolean;
          appId?: string;
          installationId?: string;
          privateKeyFile?: string;
          viaPool?: string;
        },
      ) => {
        const app = opts.appId !== undefined || opts.installationId !== undefined || opts.privateKeyFile !== undefined;
        const tokenGiven = opts.vcsTokenFile !== undefined || opts.vcsTokenStdin === true;
        if (
          (app && tokenGiven) ||
          (!app && !tokenGiven && opts.viaPool === undefined) ||
          (opts.vcsTokenFile !== undefined && opts.vcsTokenStdin === true)
        )
          throw new DroverError(
            "bad_request",
            "give the GitHub/GitLab token with --vcs-token-file <path> or --vcs-token-stdin, or a GitHub App with --app-id, --installation-id and --private-key-file (one of them), or none with --via-pool",
          );
        let auth:
          | { token: string }
          | { githubApp: { appId: string; installationId: number; privateKey: string } }
          | Record<string, never> = {};
        if (app) {
          if (opts.appId === undefined || opts.installationId === undefined || opts.privateKeyFile === undefined)
            throw new DroverError(
              "bad_request",
              "a GitHub App needs all of --app-id, --installation-id and --private-key-file",
            );
          if (!/^[0-9]+$/.test(opts.installationId))
            throw new DroverError(
              "bad_request",
              `--installation-id is a number, not ${JSON.stringify(opts.installationId)}`,
            );
          const privateKey = await readSecret(opts.privateKeyFile, "private key");
          auth = { githubApp: { appId: opts.appId, installationId: Number(opts.installationId), privateKey } };
        } else if (tokenGiven)
          auth = { token: await readSecret(opts.vcsTokenStdin ? "-" : (opts.vcsTokenFile ?? "-"), "VCS token") };
        const created = await apiFor(opts).call(routes.createVcsConnection, {
          body: {
            name,
            provider: opts.provider,
            url: opts.vcsUrl,
            ...(opts.apiUrl === undefined ? {} : { apiUrl: opts.apiUrl }),
            ...(opts.viaPool === undefined ? {} : { viaPool: opts.viaPool }),
            ...auth,
          },
        });
        emit(
          opts,
          created,
          (c) =>
            `Connected ${c.provider} ${c.url} (API ${c.apiUrl}) as ${c.name} (${c.id})${c.app ? `, as GitHub App ${c.app.appId}` : ""}` +
            `${c.viaPool ? ` through VCS agent pool ${c.viaPool}` : ""}\n` +
            `  webhook URL:    ${c.webhookUrl}\n` +
            `  webhook secret: ${c.webhookSecret}`,
        );
        if (!opts.json)
          io().stderr.write(
            "The webhook secret is shown once. `drover workspace link` registers the webhook where the token may;" +
              " otherwise register it with this URL and secret" +
              (created.provider === "github"
                ? " (content type application/json; events: push, pull requests).\n"
                : " (as its secret token; triggers: push events, merge request events).\n"),
          );
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
  withCommon(vcs.command("show <name>").description("Show a VCS connection and its webhook URL")).action(
    async (name: string, opts: CommonOptions) => {
      const c = await apiFor(opts).call(routes.getVcsConnection, { params: { connection: name } });
      emit(opts, c, () =>
        [
          `name:        ${c.name}`,
          `id:          ${c.id}`,
          `provider:    ${c.provider}`,
          `url:         ${c.url}`,
          `auth:        ${c.authKind}`,
          `webhook URL: ${c.webhookUrl}`,
          `created:     ${c.createdAt}`,
        ].join("\n"),
      );
    },
  );
  withCommon(
    vcs
      .command("deliveries <name>")
      .description("A connection's webhook deliveries, newest first, and why each did or did not start runs"),
  )
    .option("--limit <n>", "how many", "50")
    .action(async (name: string, opts: CommonOptions & { limit: string }) => {
      const { items } = await apiFor(opts).call(routes.listVcsDeliveries, {
        params: { connection: name },
        query: { limit: Number(opts.limit) },
      });
      emit(opts, items, deliveriesText);
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
  withCommon(
    ws
      .command("link [workspace]")
      .description("Run the workspace from a repository branch's new commits; -w names it too"),
  )
    .addOption(workspaceOption())
    .requiredOption("--vcs <connection>", "VCS connection (drover vcs list)")
    .requiredOption("--repo <path>", "owner/name (GitHub) or group/…/project (GitLab)")
    .requiredOption("--branch <branch>", "branch whose new commits start runs")
    .option(
      "--trigger <glob>",
      "run only for commits changing a file that matches this glob, or one in the working directory (repeatable)",
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option("--apply-on-merge", "the branch's new commits (merges) apply without confirmation")
    .option(
      "--no-apply-on-merge",
      "the branch's new commits wait for confirmation (default: the workspace's auto-apply)",
    )
    .action(
      async (
        given: string | undefined,
        opts: CommonOptions & {
          workspace?: string;
          vcs: string;
          repo: string;
          branch: string;
          trigger: string[];
          applyOnMerge?: boolean;
        },
      ) => {
        const name = workspaceOf("workspace link", given, opts.workspace);
        const link = await apiFor(opts).call(routes.linkWorkspaceVcs, {
          params: { ws: name },
          body: {
            connection: opts.vcs,
            repository: opts.repo,
            branch: opts.branch,
            triggerPaths: opts.trigger,
            applyOnMerge: opts.applyOnMerge ?? null,
          },
        });
        emit(opts, link, (l) => {
          const linked = `Linked workspace ${name} to ${l.repository} (${l.branch}) through ${l.connection}: new commits start runs`;
          const w = l.webhook;
          if (!w || w.registered) return `${linked}\nWebhook registered: ${w?.url ?? ""}`;
          return [
            linked,
            `The webhook could not be registered (${w.reason ?? "refused"}). Register it in ${l.repository}'s settings:`,
            `  URL:          ${w.url}`,
            `  Content type: application/json`,
            `  Secret:       ${w.secret ?? ""}   (shown once; ${l.provider === "gitlab" ? 'GitLab\'s "Secret token"' : 'GitHub\'s "Secret"'})`,
            `  Events:       ${l.provider === "gitlab" ? "Push events, Merge request events" : "push, pull_request"}`,
          ].join("\n");
        });
      },
    );
  withCommon(
    ws.command("unlink [workspace]").description("Stop running the workspace from its repository; -w names it too"),
  )
    .addOption(workspaceOption())
    .action(async (given: string | undefined, opts: CommonOptions & { workspace?: string }) => {
      const name = workspaceOf("workspace unlink", given, opts.workspace);
      await apiFor(opts).call(routes.unlinkWorkspaceVcs, { params: { ws: name } });
      emit(opts, { unlinked: name }, () => `Unlinked workspace ${name} from its repository`);
    });
}
