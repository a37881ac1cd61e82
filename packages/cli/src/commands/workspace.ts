import { DroverError, routes, type Engine } from "@drover/protocol";
import { readSecret } from "../secret-input.js";
import type { Command } from "commander";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { registerWorkspaceDelete } from "./workspace-delete.js";
import { usageError, workspaceAndArg, workspaceOf, workspaceOption } from "../workspace-arg.js";

type WsOpt = { workspace?: string };
import { registerWorkspaceLinkCommands } from "./vcs.js";

/** Splits `KEY=VALUE`; the value may contain '='. */
export function parseAssignment(text: string): { key: string; value: string } {
  const eq = text.indexOf("=");
  if (eq <= 0) throw new DroverError("bad_request", `expected KEY=VALUE, got ${JSON.stringify(text)}`);
  return { key: text.slice(0, eq), value: text.slice(eq + 1) };
}

/** A `<bool>` option's value, refused unless true or false. */
function boolOption(flag: string, value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  if (!/^(true|false)$/.test(value)) throw usageError(`${flag} takes true or false, got ${JSON.stringify(value)}`);
  return value === "true";
}

const allowDestroyAllHelp =
  "true: runs that do not say otherwise auto-apply even a plan that destroys everything the workspace manages";

const remoteStateConsumersHelp =
  "comma-separated workspaces whose runs may read this one's state with terraform_remote_state ('' for none)";

/** A comma-separated list of workspaces; '' is the empty list. */
function listOption(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  return value
    .split(",")
    .map((w) => w.trim())
    .filter((w) => w !== "");
}

const runnerImageHelp =
  "docker driver: image the runs' containers start from, instead of the agents' own (agents must allow it in DROVER_AGENT_DOCKER_ALLOWED_IMAGES)";

export function registerWorkspaceCommands(program: Command): void {
  const ws = program.command("workspace").description("Workspaces: one state, one run at a time");
  withCommon(ws.command("create <name>").description("Create a workspace"))
    .requiredOption("--pool <pool>", "agent pool that runs it")
    .option("--engine <engine>", "terraform or tofu", "terraform")
    .option(
      "--engine-version <version>",
      "terraform/tofu version or constraint (`~> 1.9`) the agents download, verify and run",
    )
    .option("--working-dir <dir>", "directory inside the configuration to run in", "")
    .option("--runner-image <image>", runnerImageHelp)
    .option("--auto-apply", "apply plans without confirmation")
    .option("--allow-destroy-all <bool>", allowDestroyAllHelp)
    .action(
      async (
        name: string,
        opts: CommonOptions & {
          pool: string;
          engine: string;
          engineVersion?: string;
          workingDir: string;
          runnerImage?: string;
          autoApply?: boolean;
          allowDestroyAll?: string;
        },
      ) => {
        const allowDestroyAll = boolOption("--allow-destroy-all", opts.allowDestroyAll);
        const created = await apiFor(opts).call(routes.createWorkspace, {
          // The server names a wrong engine; the CLI passes what it was given.
          body: {
            name,
            pool: opts.pool,
            engine: opts.engine as Engine,
            engineVersion: opts.engineVersion ?? null,
            workingDirectory: opts.workingDir,
            runnerImage: opts.runnerImage ?? null,
            autoApply: opts.autoApply === true,
            ...(allowDestroyAll === undefined ? {} : { allowDestroyAll }),
          },
        });
        emit(opts, created, (w) => `Created workspace ${w.name} (${w.id}) on pool ${opts.pool}`);
      },
    );
  withCommon(
    ws.command("update [workspace]").description("Change a workspace's settings (only those given); -w names it too"),
  )
    .addOption(workspaceOption())
    .option("--pool <pool>", "agent pool that runs it from its next run")
    .option("--engine <engine>", "terraform or tofu")
    .option("--engine-version <version>", "terraform/tofu version or constraint; '' returns to the agents' own")
    .option("--runner-image <image>", `${runnerImageHelp}; '' returns to the agents' own`)
    .option("--auto-apply <bool>", "true or false")
    .option("--working-dir <dir>", "directory inside the configuration to run in")
    .option("--allow-destroy-all <bool>", allowDestroyAllHelp)
    .option("--remote-state-consumers <workspaces>", remoteStateConsumersHelp)
    .option("--global-remote-state <bool>", "true: every workspace's runs may read this one's state")
    .action(
      async (
        given: string | undefined,
        opts: CommonOptions &
          WsOpt & {
            pool?: string;
            engine?: string;
            engineVersion?: string;
            runnerImage?: string;
            autoApply?: string;
            workingDir?: string;
            allowDestroyAll?: string;
            remoteStateConsumers?: string;
            globalRemoteState?: string;
          },
      ) => {
        const name = workspaceOf("workspace update", given, opts.workspace);
        const autoApply = boolOption("--auto-apply", opts.autoApply);
        const allowDestroyAll = boolOption("--allow-destroy-all", opts.allowDestroyAll);
        const remoteStateConsumers = listOption(opts.remoteStateConsumers);
        const globalRemoteState = boolOption("--global-remote-state", opts.globalRemoteState);
        const body = {
          ...(opts.pool === undefined ? {} : { pool: opts.pool }),
          // The server names a wrong engine; the CLI passes what it was given.
          ...(opts.engine === undefined ? {} : { engine: opts.engine as Engine }),
          ...(opts.engineVersion === undefined
            ? {}
            : { engineVersion: opts.engineVersion === "" ? null : opts.engineVersion }),
          ...(opts.runnerImage === undefined ? {} : { runnerImage: opts.runnerImage === "" ? null : opts.runnerImage }),
          ...(autoApply === undefined ? {} : { autoApply }),
          ...(opts.workingDir === undefined ? {} : { workingDirectory: opts.workingDir }),
          ...(allowDestroyAll === undefined ? {} : { allowDestroyAll }),
          ...(remoteStateConsumers === undefined ? {} : { remoteStateConsumers }),
          ...(globalRemoteState === undefined ? {} : { globalRemoteState }),
        };
        if (Object.keys(body).length === 0)
          throw usageError(
            "nothing to change: give --pool, --engine, --engine-version, --runner-image, --auto-apply, " +
              "--working-dir, --allow-destroy-all, --remote-state-consumers or --global-remote-state",
          );
        const updated = await apiFor(opts).call(routes.updateWorkspace, { params: { ws: name }, body });
        emit(
          opts,
          updated,
          (w) => `Updated workspace ${w.name} (${w.id})${w.runnerImage ? `: runner image ${w.runnerImage}` : ""}`,
        );
      },
    );
  withCommon(ws.command("list").description("List workspaces")).action(async (opts: CommonOptions) => {
    const { items } = await apiFor(opts).call(routes.listWorkspaces, {});
    emit(opts, items, (list) =>
      table(
        ["NAME", "ID", "ENGINE", "AUTO-APPLY", "CURRENT RUN", "LOCKED"],
        list.map((w) => [
          w.name,
          w.id,
          `${w.engine}${w.engineVersion ? ` ${w.engineVersion}` : ""}`,
          String(w.autoApply),
          w.currentRunId ?? "-",
          String(w.stateLocked),
        ]),
      ),
    );
  });
  withCommon(ws.command("show [workspace]").description("Show a workspace and its variables; -w names it too"))
    .addOption(workspaceOption())
    .action(async (given: string | undefined, opts: CommonOptions & WsOpt) => {
      const name = workspaceOf("workspace show", given, opts.workspace);
      const api = apiFor(opts);
      const w = await api.call(routes.getWorkspace, { params: { ws: name } });
      const { items: vars } = await api.call(routes.listVariables, { params: { ws: name } });
      emit(opts, { ...w, variables: vars }, (d) =>
        [
          `Workspace ${d.name} (${d.id})`,
          `  pool: ${d.poolName}  engine: ${d.engine}${d.engineVersion ? ` ${d.engineVersion}` : ""}  auto-apply: ${d.autoApply}`,
          `  working directory: ${d.workingDirectory || "."}  current run: ${d.currentRunId ?? "-"}  state locked: ${d.stateLocked}`,
          `  runner image: ${d.runnerImage ?? "the agents' own"}  allow destroy-all: ${d.allowDestroyAll}`,
          `  state readable by: ${readersText(d)}`,
          "",
          table(
            ["KEY", "KIND", "HCL", "VALUE"],
            d.variables.map((v) => [
              v.key,
              v.kind,
              v.hcl ? "yes" : "no",
              v.sensitive ? "<sensitive>" : shownValue(v.value ?? ""),
            ]),
          ),
          ...(d.variables.some((v) => !v.sensitive && shownValue(v.value ?? "") !== (v.value ?? ""))
            ? ["", "Long and multi-line values are cut here; --json shows them whole."]
            : []),
        ].join("\n"),
      );
    });
  registerWorkspaceDelete(ws);
  withCommon(
    ws
      .command("set-var [workspace] [assignment]")
      .description(
        "Set a variable: KEY=VALUE, or KEY with --value-file / --value-stdin (for secrets); with -w, KEY=VALUE alone",
      ),
  )
    .addOption(workspaceOption())
    .option("--env", "an environment variable (default: a terraform variable)")
    .option("--sensitive", "write-only: never shown again, redacted from logs")
    .option(
      "--hcl",
      "the value is one line of HCL (a list, map or object: 'tags={a=\"b\"}'), passed to terraform typed",
    )
    .option("--value-file <path>", "read the value from this file ('-' for standard input) instead of the command line")
    .option("--value-stdin", "read the value from standard input instead of the command line")
    .action(
      async (
        first: string | undefined,
        second: string | undefined,
        opts: CommonOptions &
          WsOpt & { env?: boolean; sensitive?: boolean; hcl?: boolean; valueFile?: string; valueStdin?: boolean },
      ) => {
        const { workspace: name, arg: assignment } = workspaceAndArg(
          "workspace set-var",
          "KEY=VALUE",
          first,
          second,
          opts.workspace,
        );
        if (opts.env && opts.hcl)
          throw new DroverError(
            "bad_request",
            "--hcl is for terraform variables: an environment variable (--env) is always a string",
          );
        const source = opts.valueStdin ? "-" : opts.valueFile;
        if (opts.valueStdin && opts.valueFile !== undefined)
          throw new DroverError("bad_request", "give --value-file or --value-stdin, not both");
        if (source !== undefined && assignment.includes("="))
          throw new DroverError(
            "bad_request",
            `with --value-file or --value-stdin give only the KEY, not ${JSON.stringify(assignment.split("=")[0] + "=…")}`,
          );
        const { key, value } =
          source !== undefined
            ? { key: assignment, value: await readSecret(source, `value of ${assignment}`) }
            : parseAssignment(assignment);
        const v = await apiFor(opts).call(routes.setVariable, {
          params: { ws: name, key },
          body: {
            value,
            kind: opts.env ? "env" : "terraform",
            sensitive: opts.sensitive === true,
            hcl: opts.hcl === true,
          },
        });
        emit(
          opts,
          v,
          (x) =>
            `Set ${x.kind} variable ${x.key}${x.hcl ? " (HCL)" : ""}${x.sensitive ? " (sensitive)" : ""} on ${name}`,
        );
      },
    );
  withCommon(ws.command("delete-var [workspace] [key]").description("Delete a variable; with -w, KEY alone"))
    .addOption(workspaceOption())
    .option("--env", "an environment variable")
    .action(
      async (
        first: string | undefined,
        second: string | undefined,
        opts: CommonOptions & WsOpt & { env?: boolean },
      ) => {
        const { workspace: name, arg: key } = workspaceAndArg(
          "workspace delete-var",
          "KEY",
          first,
          second,
          opts.workspace,
        );
        const api = apiFor(opts);
        const kind = opts.env ? "env" : "terraform";
        try {
          await api.call(routes.deleteVariable, { params: { ws: name, key }, query: { kind } });
        } catch (err) {
          if (!(err instanceof DroverError) || err.code !== "not_found") throw err;
          // The same key of the other kind is most likely what was meant: say which flag reaches it.
          const { items } = await api.call(routes.listVariables, { params: { ws: name } });
          if (!items.some((v) => v.key === key && v.kind !== kind)) throw err;
          throw new DroverError("not_found", err.message, {
            hint: opts.env
              ? `${key} is a terraform variable: drop --env.`
              : `${key} is an environment variable: add --env.`,
          });
        }
        emit(opts, { deleted: key }, () => `Deleted ${key} from ${name}`);
      },
    );
  registerWorkspaceLinkCommands(ws);
}

/** Widest value `workspace show` prints in its table. */
const shownValueChars = 60;

/** A variable's value as one table cell: its first line, cut to `shownValueChars`, "…" where cut. */
function shownValue(value: string): string {
  const first = value.split("\n", 1)[0] ?? "";
  const cut = first.length > shownValueChars ? first.slice(0, shownValueChars - 1) : first;
  return cut === value ? value : `${cut}…`;
}

/** Who may read a workspace's state from their runs, for `workspace show`. */
function readersText(w: { remoteStateConsumers: string[]; globalRemoteState: boolean }): string {
  if (w.globalRemoteState) return "every workspace";
  return w.remoteStateConsumers.length === 0 ? "its own runs only" : w.remoteStateConsumers.join(", ");
}
