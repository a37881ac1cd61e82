import { DroverError, SettingsSource, messageOf, settingParsers } from "@drover/protocol";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/** Where the CLI talks to, and as whom. */
export interface Settings {
  url: string;
  token: string;
}

/** The file `drover login` writes: $DROVER_CONFIG_DIR, $XDG_CONFIG_HOME/drover or ~/.config/drover. */
export function credentialsPath(env: NodeJS.ProcessEnv = process.env): string {
  const src = new SettingsSource(env);
  const dir = src.get("DROVER_CONFIG_DIR") ?? join(src.get("XDG_CONFIG_HOME") ?? join(homedir(), ".config"), "drover");
  return join(dir, "credentials.json");
}

export function readCredentials(env: NodeJS.ProcessEnv = process.env): Partial<Settings> {
  const path = credentialsPath(env);
  if (!existsSync(path)) return {};
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<Settings>;
    return { url: parsed.url, token: parsed.token };
  } catch (err) {
    throw new DroverError("bad_request", `${path} is not valid JSON: ${messageOf(err)}; run \`drover login\` again`);
  }
}

export function writeCredentials(settings: Settings, env: NodeJS.ProcessEnv = process.env): string {
  const path = credentialsPath(env);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, JSON.stringify(settings, null, 2) + "\n", { mode: 0o600 });
  chmodSync(path, 0o600);
  return path;
}

/** The deadline of one API call in ms: --timeout, else DROVER_CLIENT_TIMEOUT_SECONDS, else 60 s. */
export function resolveTimeoutMs(
  flags: { timeout?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): number {
  return new SettingsSource(env, flags).get("DROVER_CLIENT_TIMEOUT_SECONDS") * 1000;
}

function urlOfFile(url: string, env: NodeJS.ProcessEnv): string {
  try {
    return settingParsers.httpUrl(url, "url");
  } catch (err) {
    throw new DroverError("bad_request", `the url in ${credentialsPath(env)} ${messageOf(err).replace(/^url /, "")}`, {
      hint: "Run `drover login` again, or pass --url.",
    });
  }
}

/** Flags first, then DROVER_URL / DROVER_TOKEN, then the credentials file. */
export function resolveSettings(
  flags: { url?: string | undefined; token?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): Settings {
  const file = readCredentials(env);
  const src = new SettingsSource(env, flags);
  // A URL from the credentials file is checked as one from --url is, its error naming the file.
  const url = src.get("DROVER_URL") ?? (file.url === undefined ? undefined : urlOfFile(file.url, env));
  const token = src.get("DROVER_TOKEN") ?? file.token;
  if (!url) throw new DroverError("bad_request", "no server URL: pass --url, set DROVER_URL, or run `drover login`");
  if (!token)
    throw new DroverError("unauthorized", "no API token: pass --token, set DROVER_TOKEN, or run `drover login`");
  return { url: url.replace(/\/+$/, ""), token };
}

/** How long a follow keeps retrying an unreachable server, in ms (DROVER_CLIENT_RECONNECT_SECONDS). */
export function resolveReconnectMs(env: NodeJS.ProcessEnv = process.env): number {
  return new SettingsSource(env).get("DROVER_CLIENT_RECONNECT_SECONDS") * 1000;
}
