import { DroverError } from "../errors.js";

// What a setting is; the table itself is ../settings.ts, joined from the table-*.ts parts.

/**
 * The processes that read settings (`agent`: `drover agent run`; `vcs-agent`: `drover agent vcs`;
 * `runner`: the exec-loop in a run pod's runner container).
 */
export const settingReaders = [
  "server",
  "agent",
  "vcs-agent",
  "controller",
  "worker",
  "node-worker",
  "pod-annotator",
  "runner",
  "cli",
] as const;
export type SettingReader = (typeof settingReaders)[number];

/** Where a setting is documented in the README. */
export type SettingSection = "server" | "agent" | "kubernetes" | "pod" | "cli";

/** Parses a raw (non-empty) value; throws `InvalidSettingError` on a bad one. */
export type SettingParser<T> = (raw: string, name: string) => T;

/** One setting. `default` is what a process uses when the setting is unset (unless it has its own, noted in `defaultText`). */
export interface SettingSpec<T> {
  /** The command-line flag that overrides the variable, where a command has one. */
  flag?: `--${string}`;
  /** One line for the README and for error hints. */
  doc: string;
  /** How the README shows the default, when `default` alone does not say it. */
  defaultText?: string;
  default?: T;
  readers: readonly SettingReader[];
  parse: SettingParser<T>;
  section: SettingSection;
  /**
   * The Pulumi component sets it itself from its own arguments: it may not be given through
   * the component's extra `env` (each chart keeps its own list, checked against this table).
   */
  reserved?: boolean;
}

/** A setting's value is bad: names the setting, says what it must be. Exit code 2 where a process starts. */
export class InvalidSettingError extends DroverError {
  readonly setting: string;
  constructor(setting: string, message: string, options?: { hint?: string; cause?: unknown }) {
    super("invalid_setting", message, {
      ...(options?.cause === undefined ? {} : { cause: options.cause }),
      hint: options?.hint ?? `See ${setting} in the configuration tables of the README.`,
    });
    this.setting = setting;
  }
}

export function invalid(name: string, message: string, hint?: string): never {
  throw new InvalidSettingError(name, message, hint === undefined ? undefined : { hint });
}

/** A setting of the table, its default's type kept exact. */
export function setting<T, D extends NoInfer<T> | undefined = undefined>(
  spec: Omit<SettingSpec<T>, "default"> & { default?: D },
): SettingSpec<T> & { default: D } {
  return spec as SettingSpec<T> & { default: D };
}

export const agents = ["agent", "controller"] as const;
export const allAgents = ["agent", "controller", "worker", "node-worker"] as const;
/** Every process that exports OpenTelemetry. */
export const exporters = ["server", ...allAgents] as const;
