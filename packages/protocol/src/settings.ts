import { agentSettings } from "./settings/table-agent.js";
import { cliSettings } from "./settings/table-cli.js";
import { kubernetesSettings } from "./settings/table-kubernetes.js";
import { serverSettings } from "./settings/table-server.js";
import { vcsAgentSettings } from "./settings/table-vcs-agent.js";
import {
  invalid,
  InvalidSettingError,
  type SettingParser,
  type SettingReader,
  type SettingSection,
  type SettingSpec,
} from "./settings/spec.js";

/**
 * Every setting of every Drover process, declared once: its variable, its flag, how it is
 * parsed, its default, one line of documentation, and which processes read it. Processes load
 * their configuration through `SettingsSource`; the README's configuration tables are generated
 * from this table (`node scripts/settings-docs.mjs`), and tests check that no code, chart or
 * Pulumi component reads or sets a `DROVER_*` variable that is not here.
 */

export {
  settingReaders,
  InvalidSettingError,
  type SettingReader,
  type SettingSection,
  type SettingParser,
  type SettingSpec,
} from "./settings/spec.js";
export {
  otelSamplers,
  stopActions,
  minimumGraceSeconds,
  logFormats,
  settingParsers,
  type OtelSampler,
  type StopAction,
  type LogFormat,
} from "./settings/parsers.js";

/** The settings, by variable (the parts keep the README's order: server, agents, Kubernetes, CLI). */
export const settings = {
  ...serverSettings,
  ...agentSettings,
  ...vcsAgentSettings,
  ...kubernetesSettings,
  ...cliSettings,
};

export type SettingName = keyof typeof settings;
type Table = typeof settings;
/** The parsed type of a setting. */
export type SettingValue<N extends SettingName> = Table[N] extends SettingSpec<infer T> ? T : never;
type WithDefault<N extends SettingName> = Table[N]["default"] extends undefined
  ? SettingValue<N> | undefined
  : SettingValue<N>;

/**
 * Variables Drover sets for others, never reads as settings: the run's own and the
 * tag on a run's processes. Known, so not reported as misspellings.
 */
export const nonSettingVariables = [
  "DROVER_RUN_ID",
  "DROVER_WORKSPACE_NAME",
  "DROVER_WORKSPACE_ID",
  "DROVER_RUN_PHASE",
  "DROVER_RUN_IS_DESTROY",
  "DROVER_AGENT_PROCESS_TAG",
] as const;
/**
 * Variables of the repository's own build scripts (`scripts/build-images.mjs`), not read by a
 * Drover process: known, so a developer who sets them is not warned.
 */
export const buildScriptVariables = [
  "DROVER_CACHE_DIR",
  "DROVER_DEBIAN_MIRROR",
  "DROVER_TERRAFORM_BIN",
  "DROVER_IMAGES_LOCKED",
] as const;
/** Variables of the project's own test suite (`DROVER_TEST_*`); never read by a Drover process. */
export const testVariablePrefix = "DROVER_TEST_";

/** Flag values as commander gives them (camelCase keys). */
export type FlagValues = Readonly<Record<string, string | boolean | number | undefined>>;

/** The commander option key of a flag: `--token-file` → `tokenFile`. */
export function flagKey(flag: string): string {
  return flag.replace(/^--/, "").replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * A process's view of its settings: a flag beats its variable, which beats any file or default.
 * An empty value counts as unset. The one place a Drover process reads its environment.
 */
export class SettingsSource {
  constructor(
    private readonly env: Readonly<Record<string, string | undefined>>,
    private readonly flags: FlagValues = {},
  ) {}

  /** Where a setting comes from: its flag, its variable, or neither. */
  origin(name: SettingName): "flag" | "env" | undefined {
    const spec: SettingSpec<unknown> = settings[name];
    const flag = spec.flag ? this.flags[flagKey(spec.flag)] : undefined;
    if (flag !== undefined && flag !== "") return "flag";
    const value = this.env[name];
    return value !== undefined && value !== "" ? "env" : undefined;
  }

  /** The raw text of a setting (flag, else variable), or undefined. */
  raw(name: SettingName): string | undefined {
    const spec: SettingSpec<unknown> = settings[name];
    switch (this.origin(name)) {
      case "flag":
        return String(spec.flag ? this.flags[flagKey(spec.flag)] : "");
      case "env":
        return this.env[name];
      default:
        return undefined;
    }
  }

  /**
   * Parses a value with the error naming what the user wrote: `--url` when the flag gave the
   * value, the variable otherwise (the error's `setting` stays the variable).
   */
  private parse<T>(name: SettingName, raw: string, parse: SettingParser<T>): T {
    const flag = settings[name].flag;
    try {
      return parse(raw, name);
    } catch (err) {
      if (!(err instanceof InvalidSettingError) || flag === undefined || this.origin(name) !== "flag") throw err;
      throw new InvalidSettingError(name, err.message.replaceAll(name, flag), {
        cause: err,
        ...(err.hint === undefined ? {} : { hint: err.hint }),
      });
    }
  }

  /** The parsed setting, else the table's default. */
  get<N extends SettingName>(name: N): WithDefault<N> {
    const raw = this.raw(name);
    const spec = settings[name] as SettingSpec<SettingValue<N>>;
    return (raw === undefined ? spec.default : this.parse(name, raw, spec.parse)) as WithDefault<N>;
  }

  /** The parsed setting, else `fallback` (a process whose default differs from the table's). */
  getOr<N extends SettingName>(
    name: N,
    fallback: SettingValue<N>,
    parse?: SettingParser<SettingValue<N>>,
  ): SettingValue<N> {
    const raw = this.raw(name);
    if (raw === undefined) return fallback;
    return this.parse(name, raw, parse ?? (settings[name] as SettingSpec<SettingValue<N>>).parse);
  }

  /** The parsed setting; unset fails with what it is for. */
  require<N extends SettingName>(name: N, why: string): SettingValue<N> {
    const raw = this.raw(name);
    if (raw === undefined) invalid(name, `${name} is not set: ${why}`, `Set ${name}.`);
    return this.parse(name, raw, (settings[name] as SettingSpec<SettingValue<N>>).parse);
  }

  /** Whether any variable of the environment is set (not a flag). */
  has(variable: string): boolean {
    const v = this.env[variable];
    return v !== undefined && v !== "";
  }
}

/** Levenshtein distance, for naming the closest known setting. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(
        (prev[j] ?? 0) + 1,
        (row[j - 1] ?? 0) + 1,
        (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/** The known setting closest to `name`. */
export function closestSetting(name: string): SettingName {
  let best: SettingName = "DROVER_URL";
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const known of Object.keys(settings) as SettingName[]) {
    const d = editDistance(name, known);
    if (d < bestDistance) [best, bestDistance] = [known, d];
  }
  return best;
}

/**
 * One warning line for each `DROVER_*` variable no Drover process reads (a misspelling is
 * otherwise silently ignored), naming the closest known setting.
 */
export function unknownSettingWarnings(env: Readonly<Record<string, string | undefined>>): string[] {
  const known = new Set<string>([...Object.keys(settings), ...nonSettingVariables, ...buildScriptVariables]);
  return Object.keys(env)
    .filter((k) => k.startsWith("DROVER_") && !k.startsWith(testVariablePrefix) && !known.has(k))
    .sort()
    .map((k) => `${k} is not a Drover setting and is ignored; did you mean ${closestSetting(k)}?`);
}

/** The settings a process reads. */
export function settingsReadBy(reader: SettingReader): SettingName[] {
  return (Object.keys(settings) as SettingName[]).filter((n) =>
    (settings[n].readers as readonly SettingReader[]).includes(reader),
  );
}

/** Settings the Pulumi component sets itself and refuses in its extra `env`. */
export function reservedSettings(): SettingName[] {
  return (Object.keys(settings) as SettingName[]).filter(
    (n) => (settings[n] as SettingSpec<unknown>).reserved === true,
  );
}

/** The README table of one section: variable (flag), default, meaning. */
export function settingsTable(section: SettingSection): string {
  const rows = (Object.keys(settings) as SettingName[])
    .filter((n) => settings[n].section === section)
    .map((n) => {
      const spec: SettingSpec<unknown> = settings[n];
      const shown = spec.defaultText ?? (spec.default === undefined ? "—" : `\`${String(spec.default)}\``);
      return `| \`${n}\`${spec.flag ? ` (\`${spec.flag}\`)` : ""} | ${shown} | ${spec.doc} | ${spec.readers.join(", ")} |`;
    });
  return ["| variable (flag) | default | meaning | read by |", "|---|---|---|---|", ...rows].join("\n");
}

const sections: readonly SettingSection[] = ["server", "agent", "kubernetes", "pod", "cli"];

/**
 * The README with each `<!-- settings:SECTION -->` … `<!-- /settings -->` block replaced by
 * that section's generated table (what `scripts/settings-docs.mjs` writes; a test checks it).
 */
export function withSettingsTables(readme: string): string {
  return readme.replace(
    /(<!-- settings:([a-z-]+) -->\n)[\s\S]*?(\n<!-- \/settings -->)/g,
    (_, open: string, section: string, close: string) => {
      if (!(sections as readonly string[]).includes(section))
        throw new Error(`README: unknown settings section ${section}`);
      return open + settingsTable(section as SettingSection) + close;
    },
  );
}
