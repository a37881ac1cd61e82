import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { DroverError } from "./errors.js";
import { isImagePattern } from "./images.js";

/**
 * Every setting of every Drover process, declared once: its variable, its flag, how it is
 * parsed, its default, one line of documentation, and which processes read it. Processes load
 * their configuration through `SettingsSource`; the README's configuration tables are generated
 * from this table (`node scripts/settings-docs.mjs`), and tests check that no code, chart or
 * Pulumi component reads or sets a `DROVER_*` variable that is not here.
 */

/** The processes that read settings (`runner`: the exec-loop in a run pod's runner container). */
export const settingReaders = [
  "server",
  "agent",
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

function invalid(name: string, message: string, hint?: string): never {
  throw new InvalidSettingError(name, message, hint === undefined ? undefined : { hint });
}

// ---- parsers ----

/** Any non-empty text. */
const text: SettingParser<string> = (raw) => raw;

/** An IPv4 or IPv6 address literal (no brackets, no host name). */
const ipAddress: SettingParser<string> = (raw, name) =>
  isIP(raw) === 0 ? invalid(name, `${name} must be an IPv4 or IPv6 address, got ${JSON.stringify(raw)}`) : raw;

/** `true`/`false` (also 1/0, yes/no, on/off). */
const bool: SettingParser<boolean> = (raw, name) => {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  return invalid(name, `${name} must be true or false, got ${JSON.stringify(raw)}`);
};

/** A whole number within [min, max] (max may be Infinity). */
function intIn(min: number, max = Number.POSITIVE_INFINITY): SettingParser<number> {
  return (raw, name) => {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isInteger(n) || n < min || n > max) {
      invalid(
        name,
        `${name} must be a whole number ${Number.isFinite(max) ? `from ${min} to ${max}` : `≥ ${min}`}, got ${JSON.stringify(raw)}`,
      );
    }
    return n;
  };
}

/**
 * Seconds, a fraction allowed to the millisecond (`0.25`): short enough for tests of leases and
 * silent agents to wait well under a second, and still seconds for everyone else.
 */
function secondsFrom(min: number): SettingParser<number> {
  return (raw, name) => {
    const n = Number(raw);
    if (!/^\d+(\.\d{1,3})?$/.test(raw.trim()) || n < min)
      invalid(name, `${name} must be a number of seconds ≥ ${min} (up to 3 decimals), got ${JSON.stringify(raw)}`);
    return n;
  };
}

/** One of `allowed`. */
function oneOf<T extends string>(allowed: readonly T[]): SettingParser<T> {
  return (raw, name) => {
    if (!(allowed as readonly string[]).includes(raw))
      invalid(name, `${name} must be one of ${allowed.join(", ")}, got ${JSON.stringify(raw)}`);
    return raw as T;
  };
}

/** An http:// or https:// URL, without trailing slashes. */
const httpUrl: SettingParser<string> = (raw, name) => {
  const url = raw.replace(/\/+$/, "");
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return invalid(
      name,
      `${name} is not a URL: ${JSON.stringify(url)}`,
      "Give the server's address, for example https://drover.example.com.",
    );
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    invalid(name, `${name} must be http:// or https://, got ${JSON.stringify(url)}`);
  return url;
};

/** An absolute path, without a trailing slash. */
const absolutePath: SettingParser<string> = (raw, name) => {
  if (!raw.startsWith("/")) invalid(name, `${name} must be an absolute path, got ${JSON.stringify(raw)}`);
  return raw.replace(/(.)\/+$/, "$1");
};

/** A path that exists when the process starts. */
const existingPath: SettingParser<string> = (raw, name) => {
  if (!existsSync(raw)) invalid(name, `${name} ${raw} does not exist`, "Create it, or correct the path.");
  return raw;
};

/**
 * A PEM bundle given as the path of a file or as base64 of the PEM text; the value is the PEM
 * text. A path that cannot be read is named with the reason.
 */
const pemBundle: SettingParser<string> = (raw, name) => {
  const hint = "Give the path of a readable PEM file, or the PEM bundle encoded in base64.";
  const decoded = Buffer.from(raw, "base64").toString("utf8");
  // A path never decodes to PEM text; base64 of PEM never names an existing file.
  if (!existsSync(raw) && decoded.includes("-----BEGIN CERTIFICATE-----")) return decoded;
  try {
    return readFileSync(raw, "utf8");
  } catch (err) {
    const reason =
      (err as NodeJS.ErrnoException).code === "ENOENT"
        ? "no such file"
        : err instanceof Error
          ? err.message
          : String(err);
    return invalid(
      name,
      `${name}: cannot read ${raw} (${reason}), and it is not a base64-encoded PEM bundle either`,
      hint,
    );
  }
};

/** A Kubernetes object name (DNS subdomain). */
const kubernetesName: SettingParser<string> = (raw, name) => {
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(raw))
    invalid(
      name,
      `${name} must be a Kubernetes object name (lower-case letters, digits, '-' and '.'), got ${JSON.stringify(raw)}`,
    );
  return raw;
};

/** A Docker Engine API socket: `unix:///path` or an absolute path. */
const dockerHost: SettingParser<string> = (raw, name) => {
  if (!raw.replace(/^unix:\/\//, "").startsWith("/"))
    invalid(
      name,
      `${name} must be unix:///path/to/docker.sock (the Engine API's unix socket), got ${JSON.stringify(raw)}`,
      "the docker driver talks to the daemon over its unix socket only",
    );
  return raw;
};

/** A comma-separated list of image references or prefixes ending in `*` (empty entries dropped). */
const imagePatterns: SettingParser<string[]> = (raw, name) => {
  const list = raw
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "");
  const bad = list.filter((p) => !isImagePattern(p));
  if (bad.length > 0)
    invalid(
      name,
      `${name} must list image references or prefixes ending in '*', separated by commas; not one: ${bad.map((b) => JSON.stringify(b)).join(", ")}`,
    );
  return list;
};

/** A number of CPUs from 0 to 1024, decimals allowed. */
const cpuCount: SettingParser<number> = (raw, name) => {
  const n = Number(raw);
  if (!/^\d+(\.\d+)?$/.test(raw) || !(n >= 0 && n <= 1024))
    invalid(name, `${name} must be a number of CPUs from 0 (no limit) to 1024, like 1.5, got ${JSON.stringify(raw)}`);
  return n;
};

/** Armored OpenPGP public keys given as the path of a file or as base64 of the armored text; the value is the text. */
const pgpKeys: SettingParser<string> = (raw, name) => {
  const marker = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
  const decoded = Buffer.from(raw, "base64").toString("utf8");
  if (!existsSync(raw) && decoded.includes(marker)) return decoded;
  let text: string;
  try {
    text = readFileSync(raw, "utf8");
  } catch (err) {
    const reason =
      (err as NodeJS.ErrnoException).code === "ENOENT"
        ? "no such file"
        : err instanceof Error
          ? err.message
          : String(err);
    return invalid(
      name,
      `${name}: cannot read ${raw} (${reason}), and it is not base64 of armored public keys either`,
      "Give the path of a file of armored OpenPGP public keys (gpg --armor --export), or that text in base64.",
    );
  }
  if (!text.includes(marker))
    invalid(name, `${name}: ${raw} holds no armored OpenPGP public key`, "Export the keys with gpg --armor --export.");
  return text;
};

/** A comma-separated list of OpenPGP key fingerprints (40 hex digits, spaces allowed), upper-cased. */
const fingerprints: SettingParser<string[]> = (raw, name) =>
  raw
    .split(",")
    .map((f) => f.replace(/\s+/g, "").toUpperCase())
    .filter((f) => f !== "")
    .map((f) =>
      /^[0-9A-F]{40}$/.test(f)
        ? f
        : invalid(
            name,
            `${name} must list full 40-digit key fingerprints separated by commas, got ${JSON.stringify(f)}`,
          ),
    );

/**
 * OpenTelemetry's `key=value,…` lists (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES):
 * keys and values trimmed and percent-decoded, as the specification's W3C Baggage-like format.
 */
const keyValues: SettingParser<Record<string, string>> = (raw, name) => {
  const out: Record<string, string> = {};
  for (const item of raw.split(",")) {
    if (item.trim() === "") continue;
    const at = item.indexOf("=");
    let key = "";
    let value = "";
    try {
      key = decodeURIComponent(item.slice(0, at).trim());
      value = decodeURIComponent(item.slice(at + 1).trim());
    } catch {
      // A malformed escape falls through to the message below.
    }
    if (at <= 0 || key === "")
      invalid(
        name,
        `${name} must be key=value pairs separated by commas (values percent-encoded), got ${JSON.stringify(item.trim())}`,
      );
    out[key] = value;
  }
  return out;
};

/** The samplers of OTEL_TRACES_SAMPLER that a process offers (the specification's built-in ones). */
export const otelSamplers = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
] as const;
export type OtelSampler = (typeof otelSamplers)[number];

/** A probability from 0 to 1. */
const ratio: SettingParser<number> = (raw, name) => {
  const n = Number(raw);
  if (raw.trim() === "" || !(n >= 0 && n <= 1))
    invalid(name, `${name} must be a number from 0 to 1 (the share of traces kept), got ${JSON.stringify(raw)}`);
  return n;
};

/** What the agent does with running jobs on SIGTERM (SPEC §5). */
export const stopActions = ["graceful", "drain", "force"] as const;
export type StopAction = (typeof stopActions)[number];
/** The shortest grace period (seconds) each stop action works with (SPEC §5). */
export const minimumGraceSeconds: Readonly<Record<StopAction, number>> = { graceful: 30, drain: 120, force: 10 };
export const logFormats = ["json", "plain", "dev"] as const;
export type LogFormat = (typeof logFormats)[number];

/** The parsers settings use, for a process that needs a narrower one (`SettingsSource.getOr`). */
export const settingParsers = {
  text,
  bool,
  intIn,
  oneOf,
  httpUrl,
  absolutePath,
  existingPath,
  pemBundle,
  kubernetesName,
};

function setting<T, D extends NoInfer<T> | undefined = undefined>(
  spec: Omit<SettingSpec<T>, "default"> & { default?: D },
): SettingSpec<T> & { default: D } {
  return spec as SettingSpec<T> & { default: D };
}

const agents = ["agent", "controller"] as const;
const allAgents = ["agent", "controller", "worker", "node-worker"] as const;
const seconds7d = intIn(1, 7 * 86_400);
const sizeMb = intIn(1, 10_000_000);
/** Every process that exports OpenTelemetry. */
const exporters = ["server", ...allAgents] as const;

/** The settings, by variable. */
export const settings = {
  // ---- server ----
  DROVER_DATA_DIR: setting({
    flag: "--data-dir",
    doc: "directory of the SQLite database, and of `uploads/`, where large request bodies are spooled while their request lasts (emptied at start: give each server process its own)",
    default: ".drover",
    defaultText: "`./.drover`",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_DATABASE_URL: setting({
    flag: "--database-url",
    doc: "`postgres://…` or `sqlite:<path>`",
    defaultText: "SQLite in the data dir",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS: setting({
    doc: "PostgreSQL: longest wait for a connection (new or from the pool)",
    default: 10,
    readers: ["server"],
    parse: intIn(1),
    section: "server",
  }),
  DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: setting({
    doc: "PostgreSQL: longest a statement may run (`statement_timeout`; the client gives up 5 s later if the server stops answering)",
    default: 60,
    readers: ["server"],
    parse: intIn(1),
    section: "server",
  }),
  DROVER_HOST: setting({
    flag: "--host",
    doc: "listen address (`0.0.0.0` in containers)",
    default: "127.0.0.1",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_PORT: setting({
    flag: "--port",
    doc: "listen port",
    default: 8800,
    readers: ["server"],
    parse: intIn(0, 65_535),
    section: "server",
  }),
  DROVER_PUBLIC_URL: setting({
    flag: "--public-url",
    doc: "how agents reach the server; embedded in pool tokens",
    defaultText: "`http://<host>:<port>`",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_ADMIN_TOKEN: setting({
    doc: "an admin API token of your choosing",
    defaultText: "generated once",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_TLS_CERT_FILE: setting({
    doc: "certificate (PEM) to serve HTTPS with; set with `DROVER_TLS_KEY_FILE`",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_TLS_KEY_FILE: setting({
    doc: "private key (PEM) of `DROVER_TLS_CERT_FILE`",
    readers: ["server"],
    parse: text,
    section: "server",
  }),
  DROVER_LEASE_TTL_SECONDS: setting({
    doc: "a job lease lives this long without a heartbeat; no lease expires until the server has reached its database for this long (after a start or a database outage); fractions allowed, e.g. 0.5",
    default: 30,
    readers: ["server"],
    parse: secondsFrom(0.1),
    section: "server",
  }),
  DROVER_AGENT_TTL_SECONDS: setting({
    doc: "an agent silent this long is shown offline (fractions allowed, e.g. 0.5)",
    default: 60,
    readers: ["server"],
    parse: secondsFrom(0.1),
    section: "server",
  }),
  DROVER_AGENT_HEARTBEAT_SECONDS: setting({
    doc: "heartbeat interval agents are told to use (fractions allowed, e.g. 0.5)",
    default: 10,
    readers: ["server"],
    parse: secondsFrom(0.1),
    section: "server",
  }),
  DROVER_SWEEP_INTERVAL_MS: setting({
    doc: "how often the server looks for expired leases and silent agents",
    default: 1000,
    readers: ["server"],
    parse: intIn(10),
    section: "server",
  }),
  DROVER_MAX_CONFIGURATION_MB: setting({
    doc: "largest configuration upload (tar.gz)",
    default: 100,
    readers: ["server"],
    parse: intIn(1),
    section: "server",
  }),
  DROVER_MAX_PLAN_JSON_MB: setting({
    doc: "largest plan JSON (`terraform show -json`) an agent may upload: a larger one gets `413` and the run shows no plan JSON (its counts come from terraform's summary line). It is parsed and redacted off the event loop, in memory several times its size",
    default: 100,
    readers: ["server"],
    parse: intIn(1, 4096),
    section: "server",
  }),
  DROVER_MAX_JOB_LOG_MB: setting({
    doc: "most log bytes stored per job: the rest of a longer log is dropped and the log ends with a line saying it was truncated (the run goes on)",
    default: 256,
    readers: ["server"],
    parse: intIn(1, 1_000_000),
    section: "server",
  }),
  DROVER_METRICS_PUBLIC_NAMES: setting({
    doc: "`/metrics` without a token labels pool series with pool names; `false`: with pool ids. Scraped with a user API token (`Authorization: Bearer`), it always shows names",
    default: false,
    readers: ["server"],
    parse: bool,
    section: "server",
  }),
  DROVER_METRICS_CACHE_SECONDS: setting({
    doc: "the gauges `/metrics` computes from the database (queue depth, runs, agents, pool demand) are recomputed at most this often, however often it is scraped; `0`: at every scrape",
    default: 5,
    readers: ["server"],
    parse: intIn(0, 300),
    section: "server",
  }),
  DROVER_FORCE_CANCEL_AFTER_SECONDS: setting({
    doc: "a running job that ignores a cancel this long is force-canceled: it ends on the server, its job token stops working, its state lock is released (`drover run cancel --force` does it at once)",
    default: 120,
    readers: ["server"],
    parse: intIn(1),
    section: "server",
  }),
  DROVER_JOB_TOKEN_RETENTION_SECONDS: setting({
    doc: "how long a job's tokens are still recognised after the job stops being leased (finished, requeued): an agent back from a partition is told its job is over (`job_finished`, `stale_attempt`) rather than that its token is unknown; then the sweeper deletes them. `0`: deleted at the next sweep",
    default: 86_400,
    readers: ["server"],
    parse: intIn(0, 30 * 86_400),
    section: "server",
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: setting({
    doc: "every process: OpenTelemetry collector used when the process's own `DROVER_OTLP_ENDPOINT` / `DROVER_AGENT_OTLP_ENDPOINT` is unset (those win)",
    readers: exporters,
    parse: httpUrl,
    section: "server",
  }),
  OTEL_EXPORTER_OTLP_PROTOCOL: setting({
    doc: "every process: `http/protobuf` or `grpc` when its own `DROVER_…_OTLP_PROTOCOL` is unset (that wins); `http/json` is not offered",
    defaultText: "`http/protobuf`",
    readers: exporters,
    parse: oneOf(["http/protobuf", "grpc"] as const),
    section: "server",
  }),
  OTEL_EXPORTER_OTLP_HEADERS: setting({
    doc: "every process: headers sent with each export, `key=value,…` with percent-encoded values (`authorization=Bearer%20…`); not copied into Kubernetes run pods",
    readers: exporters,
    parse: keyValues,
    section: "server",
  }),
  OTEL_SERVICE_NAME: setting({
    doc: "every process: `service.name` of what it exports; beats `service.name` in `OTEL_RESOURCE_ATTRIBUTES`",
    defaultText: "`drover-server`, `drover-agent`, `drover-controller`, `drover-worker`, `drover-node-worker`",
    readers: exporters,
    parse: text,
    section: "server",
  }),
  OTEL_RESOURCE_ATTRIBUTES: setting({
    doc: "every process: resource attributes added to what it exports, `key=value,…` (percent-encoded); beat Drover's own (`k8s.pod.name`, …) except `drover.*`",
    readers: exporters,
    parse: keyValues,
    section: "server",
  }),
  OTEL_METRIC_EXPORT_INTERVAL: setting({
    doc: "every process: milliseconds between two metric exports",
    default: 60_000,
    readers: exporters,
    parse: intIn(100, 86_400_000),
    section: "server",
  }),
  OTEL_TRACES_SAMPLER: setting({
    doc: "every process: which traces are kept: `always_on`, `always_off`, `traceidratio`, `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio` (a job's trace id is the same in every process, so ratios agree)",
    default: "parentbased_always_on",
    readers: exporters,
    parse: oneOf(otelSamplers),
    section: "server",
  }),
  OTEL_TRACES_SAMPLER_ARG: setting({
    doc: "every process: the ratio of `traceidratio` samplers, 0 to 1",
    default: 1,
    readers: exporters,
    parse: ratio,
    section: "server",
  }),
  DROVER_OTLP_ENDPOINT: setting({
    doc: "OpenTelemetry collector the server exports to (`http://collector:4318` for http/protobuf, `:4317` for grpc); unset: no exporter is loaded",
    readers: ["server"],
    parse: httpUrl,
    section: "server",
  }),
  DROVER_OTLP_PROTOCOL: setting({
    doc: "`http/protobuf` or `grpc`",
    default: "http/protobuf",
    readers: ["server"],
    parse: oneOf(["http/protobuf", "grpc"] as const),
    section: "server",
  }),
  DROVER_OTLP_TRACES_ENABLED: setting({
    doc: "with an endpoint: export a trace per run phase (the job's root span and its queue wait)",
    default: true,
    readers: ["server"],
    parse: bool,
    section: "server",
  }),
  DROVER_OTLP_METRICS_ENABLED: setting({
    doc: "with an endpoint: export the series of `/metrics` (gauges, counters, histograms), same names",
    default: true,
    readers: ["server"],
    parse: bool,
    section: "server",
  }),
  DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: setting({
    doc: "diagnostics: check every JSON answer against its route's response schema in the route table; an answer outside it becomes a 500 and an error in the log (the test suite turns it on; it costs a schema check per answer)",
    default: false,
    readers: ["server"],
    parse: bool,
    section: "server",
  }),
  DROVER_LOG_LEVEL: setting({
    flag: "--log-level",
    doc: "`debug`, `info`, `warn`, `error`",
    default: "info",
    readers: ["server"],
    parse: text,
    section: "server",
  }),

  // ---- agents ----
  DROVER_URL: setting({
    flag: "--url",
    doc: "server URL (agents: defaults to the one in the pool token)",
    defaultText: "from the token",
    readers: [...allAgents, "cli"],
    parse: httpUrl,
    section: "agent",
    reserved: true,
  }),
  DROVER_TOKEN: setting({
    flag: "--token",
    doc: "pool token of an agent (used to register only); API token of the CLI",
    readers: [...agents, "cli"],
    parse: text,
    section: "agent",
    reserved: true,
  }),
  DROVER_TOKEN_FILE: setting({
    flag: "--token-file",
    doc: "file holding the pool token; `--token-file` beats `DROVER_TOKEN`, `--token` beats both",
    readers: agents,
    parse: text,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_NAME: setting({
    flag: "--name",
    doc: "unique within the pool",
    defaultText: "hostname",
    readers: agents,
    parse: text,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_DRIVER: setting({
    flag: "--driver",
    doc: "`local`, `docker` (each job in its own container) or `kubernetes`",
    default: "local",
    readers: agents,
    parse: oneOf(["local", "kubernetes", "docker"] as const),
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_CONCURRENCY: setting({
    flag: "--concurrency",
    doc: "jobs in flight; local at most 5, docker at most 50",
    defaultText: "1 (local, docker), 10 (controller)",
    readers: agents,
    parse: intIn(1, 1000),
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_SINGLE: setting({
    flag: "--single",
    doc: "take one job, finish it, deregister, exit 0",
    default: false,
    readers: ["agent"],
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_DATA_DIR: setting({
    flag: "--data-dir",
    doc: "per-run work dirs, removed after each run",
    default: "/var/lib/drover/data",
    readers: agents,
    parse: text,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_CACHE_DIR: setting({
    flag: "--cache-dir",
    doc: "terraform/tofu binaries, providers, modules (the pod worker's is the task pod's `drover-cache` volume, set by the controller; a node worker's is `<DROVER_AGENT_NODE_HOME>/cache`)",
    default: "/var/lib/drover/cache",
    readers: [...agents, "worker"],
    parse: text,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_PROVIDER_CACHE_ENABLED: setting({
    doc: "a verified, read-only provider cache in `<cache dir>/providers` that concurrent runs share (README, Provider cache): the local agent's, a task pod worker's (shared between pods on a `persistence.cache` claim), or a node worker's for every run on its node; `false`: every run downloads its providers",
    default: true,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB: setting({
    doc: "soft limit of the provider cache: above it, entries no running job uses are evicted, least recently used first",
    default: 20_480,
    readers: allAgents,
    parse: sizeMb,
    section: "agent",
  }),
  DROVER_AGENT_MODULE_CACHE_ENABLED: setting({
    doc: "modules cached read-only in `<cache dir>/modules` — registry modules by exact version, git sources by commit, http archives by URL, with the modules they call — and installed into each run's `.terraform/modules` (README, Module cache); same processes as the provider cache",
    default: false,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB: setting({
    doc: "soft limit of the module cache: above it, entries no running job uses are evicted, least recently used first",
    default: 20_480,
    readers: allAgents,
    parse: sizeMb,
    section: "agent",
  }),
  DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES: setting({
    doc: "the module cache also fetches `git::file://` sources, as the agent's user (which may read repositories the run's user cannot); `false`: terraform fetches them itself, as the run",
    default: false,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES: setting({
    doc: "the provider and module caches may fetch from link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254, fd20:ce::254, 100.100.100.200, 168.63.129.16), and git module sources may redirect; `false`: a registry, source or redirect there fails the run (`fetch_refused`)",
    default: false,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB: setting({
    doc: "soft size limit of the terraform/tofu releases kept in `<cache dir>/engines` (the local or docker agent's, a task pod worker's, a node worker's; runs of the docker driver and of Kubernetes runner containers get the release mounted read-only): above it, releases no running job uses are removed, least recently used first",
    default: 5_120,
    readers: allAgents,
    parse: sizeMb,
    section: "agent",
  }),
  DROVER_AGENT_TERRAFORM_RELEASES_URL: setting({
    doc: "where the terraform version a workspace asks for is downloaded from (HashiCorp's layout: `index.json`, `<v>/terraform_<v>_<os>_<arch>.zip`, `_SHA256SUMS`, `_SHA256SUMS.sig`)",
    default: "https://releases.hashicorp.com/terraform",
    readers: allAgents,
    parse: httpUrl,
    section: "agent",
  }),
  DROVER_AGENT_TOFU_RELEASES_URL: setting({
    doc: "where tofu releases are downloaded from (OpenTofu's GitHub layout: `v<v>/tofu_<v>_<os>_<arch>.zip`, `_SHA256SUMS`, `_SHA256SUMS.gpgsig`)",
    default: "https://github.com/opentofu/opentofu/releases/download",
    readers: allAgents,
    parse: httpUrl,
    section: "agent",
  }),
  DROVER_AGENT_TOFU_VERSIONS_URL: setting({
    doc: 'the list of tofu versions (`{"versions":[{"id":"1.8.0"}]}`), for version constraints',
    default: "https://get.opentofu.org/tofu/api.json",
    readers: allAgents,
    parse: httpUrl,
    section: "agent",
  }),
  DROVER_AGENT_ENGINE_SIGNING_KEYS: setting({
    doc: "armored OpenPGP public keys (a file, or base64 of the text) release signatures may come from, besides HashiCorp's built-in one (OpenTofu's key goes here); only pinned fingerprints count",
    readers: allAgents,
    parse: pgpKeys,
    section: "agent",
  }),
  DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS: setting({
    doc: "comma-separated fingerprints of the keys whose signature of a release's SHA256SUMS is trusted; a release signed by any other key fails the run (`engine_key_unknown`)",
    default: ["C874011F0AB405110D02105534365D9472D7468F", "E3E6E43D84CB852EADB0051D0C0AF313E5FD9F80"],
    defaultText: "HashiCorp's `C874…468F`, OpenTofu's `E3E6…9F80`",
    readers: allAgents,
    parse: fingerprints,
    section: "agent",
  }),
  DROVER_AGENT_ENGINE_PATH_FALLBACK: setting({
    doc: "when the releases are unreachable or lack the asked version, run a terraform/tofu on PATH (docker and Kubernetes: the runner image's) that satisfies it; `false`: the run fails. A failed verification never falls back",
    default: true,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_WORKER_ON_STOP_ACTION: setting({
    flag: "--stop-action",
    doc: "`graceful`, `drain` or `force` on SIGTERM",
    default: "graceful",
    readers: allAgents,
    parse: oneOf(stopActions),
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_GRACE_PERIOD_SECONDS: setting({
    flag: "--grace-period-seconds",
    doc: "all stop timeouts derive from it; at least 30 (graceful), 120 (drain), 10 (force)",
    default: 120,
    readers: allAgents,
    parse: intIn(1, 86_400),
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_LOG_FORMAT: setting({
    flag: "--log-format",
    doc: "`json`, `plain`, `dev`",
    default: "json",
    readers: [...agents, "node-worker", "pod-annotator"],
    parse: oneOf(logFormats),
    section: "agent",
  }),
  DROVER_AGENT_DEBUG: setting({ doc: "debug logging", default: false, readers: agents, parse: bool, section: "agent" }),
  DROVER_AGENT_HEALTH_PORT: setting({
    flag: "--health-port",
    doc: "`/healthz`, `/readyz`, `/metrics`; 0 disables",
    defaultText: "`8080` (pod worker: `0`)",
    readers: allAgents,
    parse: intIn(0, 65_535),
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_HEALTH_ADDRESS: setting({
    doc: "address the health port listens on (`127.0.0.1`, `::1`, a pod IP); unset: every interface of both families, which is what kubelet probes of the pod IP need",
    defaultText: "every interface (`::` and 0.0.0.0)",
    readers: allAgents,
    parse: ipAddress,
    section: "agent",
  }),
  DROVER_AGENT_OTLP_ENDPOINT: setting({
    doc: "OpenTelemetry collector to export to (`http://collector:4318` for http/protobuf, `:4317` for grpc); unset: no exporter is loaded",
    readers: allAgents,
    parse: httpUrl,
    section: "agent",
  }),
  DROVER_AGENT_OTLP_PROTOCOL: setting({
    doc: "`http/protobuf` or `grpc`",
    default: "http/protobuf",
    readers: allAgents,
    parse: oneOf(["http/protobuf", "grpc"] as const),
    section: "agent",
  }),
  DROVER_AGENT_OTLP_METRICS_ENABLED: setting({
    doc: "with an endpoint: export the agent's `/metrics` series over OTLP, same names",
    default: true,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_OTLP_TRACES_ENABLED: setting({
    doc: "with an endpoint: export each job's stage spans, children of the server's job span",
    default: true,
    readers: allAgents,
    parse: bool,
    section: "agent",
  }),
  DROVER_AGENT_STATUS_FILE: setting({
    doc: "file the agent keeps its running-job count in (written atomically on every change), for the `pod-annotator` sidecar of agent-local's `busyPodProtection`",
    readers: ["agent", "pod-annotator"],
    parse: absolutePath,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_POD_NAME: setting({
    doc: "`drover agent pod-annotator`: the pod it annotates, its own (the downward API's `metadata.name`)",
    readers: ["pod-annotator"],
    parse: kubernetesName,
    section: "agent",
    reserved: true,
  }),
  DROVER_AGENT_POD_NAMESPACE: setting({
    doc: "`drover agent pod-annotator`: that pod's namespace (`metadata.namespace`)",
    readers: ["pod-annotator"],
    parse: kubernetesName,
    section: "agent",
    reserved: true,
  }),
  DROVER_CA_CERT: setting({
    doc: "PEM path or base64 PEM added to the trust store (of the agent's HTTP client and of the module cache's git)",
    readers: allAgents,
    parse: pemBundle,
    section: "agent",
    reserved: true,
  }),
  DROVER_CONTAINER_TASK_CA_CERT: setting({
    doc: "CA bundle given to runs (`SSL_CERT_FILE`)",
    readers: ["agent"],
    parse: existingPath,
    section: "agent",
  }),
  DROVER_AGENT_HOOKS_DIR: setting({
    flag: "--hooks-dir",
    doc: "`pre-init`, `pre-plan`, `post-plan`, `pre-apply`, `post-apply` executables",
    readers: agents,
    parse: existingPath,
    section: "agent",
  }),
  DROVER_AGENT_HOOK_TIMEOUT_SECONDS: setting({
    doc: "a hook running longer fails the run",
    default: 600,
    readers: agents,
    parse: intIn(1, 86_400),
    section: "agent",
  }),
  DROVER_AGENT_PLAN_REUSE_SECONDS: setting({
    doc: "how long a plan's initialized directory waits for its apply on this agent; 0 turns reuse off",
    default: 600,
    readers: agents,
    parse: intIn(0, 86_400),
    section: "agent",
  }),
  DROVER_AGENT_POLL_WAIT_MS: setting({
    doc: "how long one long-poll for work is held open",
    default: 50_000,
    readers: agents,
    parse: intIn(0, 50_000),
    section: "agent",
  }),
  DROVER_AGENT_RUN_AS_USER: setting({
    doc:
      "local driver, agent running as root: run terraform and hooks as `uid[:gid]` + the job slot (slot i of " +
      "`DROVER_AGENT_CONCURRENCY` runs as uid+i, gid+i unless a gid is given), so runs cannot read the agent's or each " +
      "other's environment, memory or token file; every process of a slot's uid is killed when its job ends, so the range " +
      "must be used by nothing else (65534 is refused) (the data and cache dirs become 0711, each run directory the run user's)",
    readers: ["agent"],
    parse: text,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_HOST: setting({
    flag: "--docker-host",
    doc: "docker driver: the Docker Engine API's unix socket (`unix:///path`)",
    default: "unix:///var/run/docker.sock",
    readers: ["agent"],
    parse: dockerHost,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_IMAGE: setting({
    flag: "--docker-image",
    doc: "docker driver: runner image each job's container starts from (any image with `/bin/sh` and terraform/tofu; pulled when missing)",
    default: "ghcr.io/drover-dev/drover-runner:1.11.4",
    readers: ["agent"],
    parse: text,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_ALLOWED_IMAGES: setting({
    doc: "docker driver: runner images a workspace may choose instead of `DROVER_AGENT_DOCKER_IMAGE` (its `runnerImage`), comma-separated: exact references or prefixes ending in `*` (`registry.example.com/runners/*`; `*` allows any). Compared as written, no registry or tag is implied. A run of a workspace naming an image not listed ends errored",
    defaultText: "none: workspaces cannot choose",
    readers: ["agent"],
    parse: imagePatterns,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_USER: setting({
    doc: "docker driver: numeric `uid[:gid]` the run's container runs as, never root; an agent not running as root runs containers as itself",
    defaultText: "`65532:65532`, a uid no host account should have (agent as root), else the agent's own",
    readers: ["agent"],
    parse: text,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_MEMORY_MB: setting({
    doc: 'docker driver: memory limit of each run\'s container (no swap); a run exceeding it ends errored "out of memory"; 0 = none',
    default: 4096,
    readers: ["agent"],
    parse: intIn(0, 16_777_216),
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_CPUS: setting({
    doc: "docker driver: CPUs each run's container may use, like `1.5`; 0 = no limit",
    default: 2,
    readers: ["agent"],
    parse: cpuCount,
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_DISK_MB: setting({
    doc: "docker driver: disk a run's files (its working directory and step output, on the agent's host) may take; a run past it has its container killed within seconds and ends errored \"out of disk\"; 0 = no bound",
    default: 10_240,
    readers: ["agent"],
    parse: intIn(0, 16_777_216),
    section: "agent",
  }),
  DROVER_AGENT_DOCKER_NETWORK: setting({
    doc: "docker driver: network each run's container joins (`bridge`, `host` or a network's name)",
    default: "bridge",
    readers: ["agent"],
    parse: text,
    section: "agent",
  }),

  // Terraform's own; runs inherit it, and the agent reads it to extend it with the provider cache.
  TF_CLI_CONFIG_FILE: setting({
    doc: "Terraform CLI configuration the local agent's runs inherit; one with its own `provider_installation` turns the provider cache off",
    readers: ["agent"],
    parse: text,
    section: "agent",
  }),
  // Read by undici's EnvHttpProxyAgent in every outbound client; listed so they are documented and reserved.
  HTTP_PROXY: setting({
    doc: "proxy for outbound `http://` requests; honoured by the agent and the CLI and passed to runs",
    readers: [...allAgents, "cli"],
    parse: text,
    section: "agent",
    reserved: true,
  }),
  HTTPS_PROXY: setting({
    doc: "proxy for outbound `https://` requests; honoured by the agent and the CLI and passed to runs",
    readers: [...allAgents, "cli"],
    parse: text,
    section: "agent",
    reserved: true,
  }),
  NO_PROXY: setting({
    doc: "hosts reached without the proxy",
    readers: [...allAgents, "cli"],
    parse: text,
    section: "agent",
    reserved: true,
  }),

  // ---- Kubernetes controller and node workers ----
  DROVER_AGENT_KUBERNETES_NAMESPACE: setting({
    doc: "where run Jobs are created (node workers: where their run pods are)",
    defaultText: "its own namespace",
    readers: ["controller", "node-worker"],
    parse: text,
    section: "kubernetes",
  }),
  DROVER_AGENT_KUBERNETES_WORKER_IMAGE: setting({
    doc: "image of each run pod's `worker` container",
    default: "ghcr.io/drover-dev/drover:0.1.0",
    readers: ["controller"],
    parse: text,
    section: "kubernetes",
    reserved: true,
  }),
  DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: setting({
    doc: "name of an `AgentTask` (`drover.dev/v1alpha1`) in that namespace whose `spec.jobTemplate` is merged into every run Job",
    readers: ["controller"],
    parse: text,
    section: "kubernetes",
    reserved: true,
  }),
  DROVER_AGENT_EXEC_LOOP_PATH: setting({
    doc: "exec loop the runner container starts with",
    default: "/opt/drover/packages/agent/exec-loop/exec-loop.sh",
    defaultText: "the worker image's copy",
    readers: ["controller", "node-worker"],
    parse: text,
    section: "kubernetes",
  }),
  DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS: setting({
    doc: "how long after its pod was created an image pull or container create may fail before the run errors with its reason: long enough for kubelet's backoff to outlast a registry's 429/5xx or a Secret synced late",
    default: 120,
    readers: ["controller"],
    parse: intIn(0, 7 * 86_400),
    section: "kubernetes",
  }),
  DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: setting({
    doc: "how long a run pod may stay unscheduled before the run errors",
    default: 600,
    readers: ["controller"],
    parse: seconds7d,
    section: "kubernetes",
  }),
  DROVER_AGENT_JOB_ACTIVE_DEADLINE_SECONDS: setting({
    doc: "the Job's `activeDeadlineSeconds`",
    default: 4 * 3600,
    readers: ["controller"],
    parse: seconds7d,
    section: "kubernetes",
  }),
  DROVER_AGENT_JOB_TTL_SECONDS: setting({
    doc: "the Job's `ttlSecondsAfterFinished`",
    default: 3600,
    readers: ["controller"],
    parse: intIn(0, 7 * 86_400),
    section: "kubernetes",
  }),
  DROVER_AGENT_NODE_HOME: setting({
    doc: "set: node-worker mode (agent-k8s); run pods hold only the runner and use this hostPath (node workers: required)",
    readers: ["controller", "node-worker"],
    parse: absolutePath,
    section: "kubernetes",
  }),
  DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT: setting({
    doc: "node-worker mode: the node workers' ServiceAccount (in the controller's namespace); for each run the controller creates a Role and RoleBinding (owned by the run's Job) granting it `get` on that run's job Secret only, so the workers' own Role needs no Secret and never reaches the pool token. Needs `create` on roles and rolebindings (agent-k8s grants it)",
    readers: ["controller"],
    parse: kubernetesName,
    section: "kubernetes",
  }),
  DROVER_AGENT_SWEEP_INTERVAL_SECONDS: setting({
    doc: "how often every in-flight Job is checked against those timeouts even when no event arrives (a pod left Unschedulable, a Job whose pod admission refused)",
    default: 10,
    readers: ["controller"],
    parse: seconds7d,
    section: "kubernetes",
  }),
  DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS: setting({
    doc: "deadline of one Kubernetes API call of the controller (lists, creates, reads, deletes); a call past it fails and is retried",
    default: 30,
    readers: ["controller"],
    parse: seconds7d,
    section: "kubernetes",
  }),
  DROVER_AGENT_KUBERNETES_LEADER_ELECTION: setting({
    doc: "the controller takes work only while it holds the Lease `<DROVER_AGENT_NAME>-leader` in its namespace, so two controllers of one release (a second replica, a replacement of a partitioned pod) never launch at once; others stand by, not ready",
    default: true,
    readers: ["controller"],
    parse: bool,
    section: "kubernetes",
  }),
  DROVER_AGENT_KUBERNETES_LEASE_DURATION_MS: setting({
    doc: "how long a leader Lease nobody renews keeps standbys waiting; the leader renews every fifth of it and stops taking work (exit 1) when it could not renew for two thirds of it",
    default: 15_000,
    readers: ["controller"],
    parse: intIn(300, 600_000),
    section: "kubernetes",
  }),
  DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS: setting({
    doc: "each watch of Jobs and pods (controller, node workers) asks the API server to end it after this long (`timeoutSeconds`), then resumes; one still open half as long again later (at most 60 s more: a proxy or a stalled API server holding it without events) is dropped and its objects re-listed",
    default: 300,
    readers: ["controller", "node-worker"],
    parse: intIn(1, 3600),
    section: "kubernetes",
  }),
  DROVER_AGENT_NODE_NAME: setting({
    doc: "node workers (required): this node's name (the downward API's `spec.nodeName`)",
    readers: ["node-worker"],
    parse: text,
    section: "kubernetes",
  }),
  DROVER_AGENT_CONTROLLER_NAME: setting({
    doc: "node workers (required): the controller whose run pods this worker supervises (its `DROVER_AGENT_NAME`)",
    readers: ["node-worker"],
    parse: text,
    section: "kubernetes",
  }),
  DROVER_AGENT_NODE_POLL_MS: setting({
    doc: "node workers: how often cached pods and run directories are re-examined without an event",
    default: 500,
    readers: ["node-worker"],
    parse: intIn(50, 60_000),
    section: "kubernetes",
  }),
  KUBERNETES_SERVICE_HOST: setting({
    doc: "the API server's address; Kubernetes sets it in every pod",
    readers: ["pod-annotator"],
    parse: text,
    section: "kubernetes",
  }),
  KUBERNETES_SERVICE_PORT: setting({
    doc: "the API server's port; Kubernetes sets it in every pod",
    default: 443,
    readers: ["pod-annotator"],
    parse: intIn(1, 65_535),
    section: "kubernetes",
  }),
  DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS: setting({
    doc: "pod and node workers: a runner container whose exec-loop has not written its first heartbeat this long after the worker took the job never started: the run ends errored",
    default: 600,
    readers: ["worker", "node-worker"],
    parse: intIn(1, 86_400),
    section: "kubernetes",
  }),
  DROVER_WORKER_RUNNER_STALE_SECONDS: setting({
    doc: "pod and node workers: a runner whose heartbeat is this old is lost",
    default: 30,
    readers: ["worker", "node-worker"],
    parse: intIn(1, 3600),
    section: "kubernetes",
  }),

  // ---- set by the controller in each run pod ----
  DROVER_WORKER_SECRET_DIR: setting({
    doc: "where the job's Secret (job token, assignment) is mounted",
    default: "/var/run/drover/job",
    readers: ["worker"],
    parse: text,
    section: "pod",
  }),
  DROVER_EXEC_DIR: setting({
    doc: "the exec-loop's shared directory",
    default: "/drover/exec",
    readers: ["worker", "runner"],
    parse: text,
    section: "pod",
  }),
  DROVER_WORKER_RUN_DIR: setting({
    doc: "the run's files, shared with the runner",
    default: "/drover/run",
    readers: ["worker"],
    parse: text,
    section: "pod",
  }),
  DROVER_EXEC_WORKER_TIMEOUT: setting({
    doc: "exec-loop: seconds without a worker heartbeat before the runner gives up",
    default: 60,
    readers: ["runner"],
    parse: intIn(1),
    section: "pod",
  }),
  DROVER_EXEC_TICK: setting({
    doc: "exec-loop: seconds between looks for a new step",
    default: "0.2",
    readers: ["runner"],
    parse: text,
    section: "pod",
  }),

  // ---- CLI ----
  DROVER_CONFIG_DIR: setting({
    doc: "where `drover login` keeps its credentials",
    defaultText: "`$XDG_CONFIG_HOME/drover` or `~/.config/drover`",
    readers: ["cli"],
    parse: text,
    section: "cli",
  }),
  XDG_CONFIG_HOME: setting({
    doc: "base of the default `DROVER_CONFIG_DIR`",
    defaultText: "`~/.config`",
    readers: ["cli"],
    parse: text,
    section: "cli",
  }),
  DROVER_CLIENT_TIMEOUT_SECONDS: setting({
    flag: "--timeout",
    doc: "deadline of one API call of the CLI, its answer included (a log `--follow` adds the server's wait to it); past it the call fails with `server_unreachable`",
    default: 60,
    readers: ["cli"],
    parse: intIn(1, 3600),
    section: "cli",
  }),
} as const;

export type SettingName = keyof typeof settings;
type Table = typeof settings;
/** The parsed type of a setting. */
export type SettingValue<N extends SettingName> = Table[N] extends SettingSpec<infer T> ? T : never;
type WithDefault<N extends SettingName> = Table[N]["default"] extends undefined
  ? SettingValue<N> | undefined
  : SettingValue<N>;

/**
 * Variables Drover sets for others, never reads as settings: the run's own (SPEC §3) and the
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

  /** The parsed setting, else the table's default. */
  get<N extends SettingName>(name: N): WithDefault<N> {
    const raw = this.raw(name);
    const spec = settings[name] as SettingSpec<SettingValue<N>>;
    return (raw === undefined ? spec.default : spec.parse(raw, name)) as WithDefault<N>;
  }

  /** The parsed setting, else `fallback` (a process whose default differs from the table's). */
  getOr<N extends SettingName>(
    name: N,
    fallback: SettingValue<N>,
    parse?: SettingParser<SettingValue<N>>,
  ): SettingValue<N> {
    const raw = this.raw(name);
    if (raw === undefined) return fallback;
    return (parse ?? (settings[name] as SettingSpec<SettingValue<N>>).parse)(raw, name);
  }

  /** The parsed setting; unset fails with what it is for. */
  require<N extends SettingName>(name: N, why: string): SettingValue<N> {
    const raw = this.raw(name);
    if (raw === undefined) invalid(name, `${name} is not set: ${why}`, `Set ${name}.`);
    return (settings[name] as SettingSpec<SettingValue<N>>).parse(raw, name);
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
