import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { resolve } from "node:path";
import { isImagePattern } from "../images.js";
import { invalid, type SettingParser } from "./spec.js";
import { messageOf } from "../errors.js";

/** Why a file a setting names could not be read, in words for its error. */
function readFailure(err: unknown): string {
  return (err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : messageOf(err);
}

// ---- parsers ----

/** Any non-empty text. */
export const text: SettingParser<string> = (raw) => raw;

/**
 * A token as it goes into an Authorization header: one word. Whitespace around it is dropped (a
 * Kubernetes Secret made from a file keeps its newline); a line break or space inside is a file
 * or command output holding more than the token, which HTTP would refuse with a riddle.
 */
export const token: SettingParser<string> = (raw, name) => {
  const word = raw.trim();
  // eslint-disable-next-line no-control-regex -- control characters are what this looks for
  if (/[\s\x00-\x1f\x7f]/.test(word))
    invalid(
      name,
      `${name} holds a space, line break or control character; a token is one word`,
      "Give the token alone (the file or output it came from may hold more than the token).",
    );
  return word;
};

/** An IPv4 or IPv6 address literal (no brackets, no host name). */
export const ipAddress: SettingParser<string> = (raw, name) =>
  isIP(raw) === 0 ? invalid(name, `${name} must be an IPv4 or IPv6 address, got ${JSON.stringify(raw)}`) : raw;

/** `true`/`false` (also 1/0, yes/no, on/off). */
export const bool: SettingParser<boolean> = (raw, name) => {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  return invalid(name, `${name} must be true or false, got ${JSON.stringify(raw)}`);
};

/** A whole number within [min, max] (max may be Infinity). */
export function intIn(min: number, max = Number.POSITIVE_INFINITY): SettingParser<number> {
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
export function secondsFrom(min: number): SettingParser<number> {
  return (raw, name) => {
    const n = Number(raw);
    if (!/^\d+(\.\d{1,3})?$/.test(raw.trim()) || n < min)
      invalid(name, `${name} must be a number of seconds ≥ ${min} (up to 3 decimals), got ${JSON.stringify(raw)}`);
    return n;
  };
}

/** One of `allowed`. */
export function oneOf<T extends string>(allowed: readonly T[]): SettingParser<T> {
  return (raw, name) => {
    if (!(allowed as readonly string[]).includes(raw))
      invalid(name, `${name} must be one of ${allowed.join(", ")}, got ${JSON.stringify(raw)}`);
    return raw as T;
  };
}

/** An http:// or https:// URL, without trailing slashes. */
export const httpUrl: SettingParser<string> = (raw, name) => {
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
export const absolutePath: SettingParser<string> = (raw, name) => {
  if (!raw.startsWith("/")) invalid(name, `${name} must be an absolute path, got ${JSON.stringify(raw)}`);
  return raw.replace(/(.)\/+$/, "$1");
};

/**
 * A directory of the process's own, made absolute from where the process started: terraform and
 * hooks run in other directories, where a relative path would name something else.
 */
export const localDirectory: SettingParser<string> = (raw) => resolve(raw);

/** A path that exists when the process starts, made absolute (see `localDirectory`). */
export const existingPath: SettingParser<string> = (raw, name) => {
  if (!existsSync(raw)) invalid(name, `${name} ${raw} does not exist`, "Create it, or correct the path.");
  return resolve(raw);
};

/**
 * A PEM bundle given as the path of a file or as base64 of the PEM text; the value is the PEM
 * text. A path that cannot be read is named with the reason.
 */
export const pemBundle: SettingParser<string> = (raw, name) => {
  const hint = "Give the path of a readable PEM file, or the PEM bundle encoded in base64.";
  const decoded = Buffer.from(raw, "base64").toString("utf8");
  // A path never decodes to PEM text; base64 of PEM never names an existing file.
  if (!existsSync(raw) && decoded.includes("-----BEGIN CERTIFICATE-----")) return decoded;
  try {
    return readFileSync(raw, "utf8");
  } catch (err) {
    const reason = readFailure(err);
    return invalid(
      name,
      `${name}: cannot read ${raw} (${reason}), and it is not a base64-encoded PEM bundle either`,
      hint,
    );
  }
};

/** A Kubernetes object name (DNS subdomain). */
export const kubernetesName: SettingParser<string> = (raw, name) => {
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(raw))
    invalid(
      name,
      `${name} must be a Kubernetes object name (lower-case letters, digits, '-' and '.'), got ${JSON.stringify(raw)}`,
    );
  return raw;
};

/** A Docker Engine API socket: `unix:///path` or an absolute path. */
export const dockerHost: SettingParser<string> = (raw, name) => {
  if (!raw.replace(/^unix:\/\//, "").startsWith("/"))
    invalid(
      name,
      `${name} must be unix:///path/to/docker.sock (the Engine API's unix socket), got ${JSON.stringify(raw)}`,
      "the docker driver talks to the daemon over its unix socket only",
    );
  return raw;
};

/** A comma-separated list of image references or prefixes ending in `*` (empty entries dropped). */
export const imagePatterns: SettingParser<string[]> = (raw, name) => {
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
export const cpuCount: SettingParser<number> = (raw, name) => {
  const n = Number(raw);
  if (!/^\d+(\.\d+)?$/.test(raw) || !(n >= 0 && n <= 1024))
    invalid(name, `${name} must be a number of CPUs from 0 (no limit) to 1024, like 1.5, got ${JSON.stringify(raw)}`);
  return n;
};

/** Armored OpenPGP public keys given as the path of a file or as base64 of the armored text; the value is the text. */
export const pgpKeys: SettingParser<string> = (raw, name) => {
  const marker = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
  const decoded = Buffer.from(raw, "base64").toString("utf8");
  if (!existsSync(raw) && decoded.includes(marker)) return decoded;
  let text: string;
  try {
    text = readFileSync(raw, "utf8");
  } catch (err) {
    const reason = readFailure(err);
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
export const fingerprints: SettingParser<string[]> = (raw, name) =>
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
export const keyValues: SettingParser<Record<string, string>> = (raw, name) => {
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
export const ratio: SettingParser<number> = (raw, name) => {
  const n = Number(raw);
  if (raw.trim() === "" || !(n >= 0 && n <= 1))
    invalid(name, `${name} must be a number from 0 to 1 (the share of traces kept), got ${JSON.stringify(raw)}`);
  return n;
};

/** What the agent does with running jobs on SIGTERM. */
export const stopActions = ["graceful", "drain", "force"] as const;
export type StopAction = (typeof stopActions)[number];
/** The shortest grace period (seconds) each stop action works with. */
export const minimumGraceSeconds: Readonly<Record<StopAction, number>> = { graceful: 30, drain: 120, force: 10 };
export const logFormats = ["json", "plain", "dev"] as const;
export type LogFormat = (typeof logFormats)[number];

/** The parsers settings use, for a process that needs a narrower one (`SettingsSource.getOr`). */
export const settingParsers = {
  text,
  token,
  bool,
  intIn,
  oneOf,
  httpUrl,
  absolutePath,
  existingPath,
  pemBundle,
  kubernetesName,
};

export const seconds7d = intIn(1, 7 * 86_400);
export const sizeMb = intIn(1, 10_000_000);
