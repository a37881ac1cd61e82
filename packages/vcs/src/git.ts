import { spawn } from "node:child_process";
import type { VcsProvider } from "@drover/protocol";

/*
 * Runs git for the server with a connection's credential. The credential reaches git only
 * through environment-provided configuration (an Authorization header), never argv or a URL,
 * so it shows in no process list and in no message git prints about a URL. Git reads no
 * system or user configuration, never prompts, speaks only http(s), and every call has a
 * deadline; what it prints reaches users with the credential redacted.
 */

/** How git reaches a connection's repositories. */
export interface GitAccess {
  provider: VcsProvider;
  /** The connection's web/git base URL (no trailing slash). */
  url: string;
  token: string;
}

/** A git command that failed: its redacted output, and whether the server refused the credential. */
export class GitError extends Error {
  constructor(
    message: string,
    readonly authFailed: boolean,
  ) {
    super(message);
    this.name = "GitError";
  }
}

/** The clone URL of a validated repository path of a connection. */
export function cloneUrl(access: Pick<GitAccess, "url">, repository: string): string {
  return `${access.url}/${repository}.git`;
}

// The user names providers document for a token used as an HTTP Basic password.
const basicUser: Record<VcsProvider, string> = { github: "x-access-token", gitlab: "oauth2" };

/** The secrets that must never leave the server in text: the token and the header value made from it. */
export function secretsOf(access: GitAccess): string[] {
  const basic = Buffer.from(`${basicUser[access.provider]}:${access.token}`).toString("base64");
  return [access.token, basic, Buffer.from(access.token).toString("base64")];
}

/** `text` with every secret replaced. */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s.length > 0) out = out.split(s).join("[redacted]");
  return out.replace(/(authorization:\s*)\S+(\s+\S+)?/gi, "$1[redacted]");
}

const passedThrough = [
  "PATH",
  "LANG",
  "http_proxy",
  "https_proxy",
  "no_proxy",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "NO_PROXY",
  "GIT_SSL_CAINFO",
  "SSL_CERT_FILE",
  "SSL_CERT_DIR",
];

function gitEnv(access: GitAccess, home: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const k of passedThrough) if (process.env[k] !== undefined) env[k] = process.env[k];
  const config: [string, string][] = [
    ["http.extraHeader", `Authorization: Basic ${secretsOf(access)[1] ?? ""}`],
    // Version 2 lets a depth-1 fetch name any commit, not only a branch tip.
    ["protocol.version", "2"],
    ["credential.helper", ""],
    // Keep a fetched pack as it came: unpacked into loose objects (git's default under 100
    // objects), every blob is compressed again, which took most of a large commit's fetch.
    ["fetch.unpackLimit", "1"],
  ];
  return {
    ...env,
    HOME: home,
    LC_ALL: "C",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_ALLOW_PROTOCOL: "http:https",
    GIT_CONFIG_COUNT: String(config.length),
    ...Object.fromEntries(
      config.flatMap(([k, v], i) => [
        [`GIT_CONFIG_KEY_${i}`, k],
        [`GIT_CONFIG_VALUE_${i}`, v],
      ]),
    ),
  };
}

export interface GitCall {
  access: GitAccess;
  args: string[];
  /** Working directory; also git's HOME (it reads nothing there). */
  cwd: string;
  deadlineMs: number;
  signal?: AbortSignal | undefined;
  /** Most bytes of standard output kept; past it git is stopped and `tooLarge` is thrown. */
  maxStdout?: number;
  tooLarge?: () => Error;
}

/** Runs git; resolves with its standard output, rejects with a redacted GitError. */
export function runGit(call: GitCall): Promise<Buffer> {
  const secrets = secretsOf(call.access);
  const what = `git ${call.args[0] ?? ""}`;
  return new Promise((resolve, reject) => {
    // Its own process group: the deadline also stops the git-remote-http helper it starts.
    const child = spawn("git", call.args, {
      cwd: call.cwd,
      env: gitEnv(call.access, call.cwd),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const out: Buffer[] = [];
    let outBytes = 0;
    let err = "";
    let stopped: Error | undefined;
    const stop = (reason: Error) => {
      stopped ??= reason;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(
      () => stop(new GitError(`${what} did not finish within ${Math.round(call.deadlineMs / 1000)} s`, false)),
      call.deadlineMs,
    );
    const onAbort = () => stop(new GitError(`${what} stopped: the server is shutting down`, false));
    call.signal?.addEventListener("abort", onAbort, { once: true });
    child.stdout.on("data", (chunk: Buffer) => {
      outBytes += chunk.length;
      if (call.maxStdout !== undefined && outBytes > call.maxStdout) {
        stop(call.tooLarge?.() ?? new GitError(`${what} printed too much`, false));
        return;
      }
      out.push(chunk);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      if (err.length < 16_384) err += chunk.toString("utf8");
    });
    child.on("error", (e) => stop(new GitError(`${what} could not start: ${e.message}`, false)));
    child.on("close", (code) => {
      clearTimeout(timer);
      call.signal?.removeEventListener("abort", onAbort);
      if (stopped) return reject(stopped);
      if (code === 0) return resolve(Buffer.concat(out));
      const text = redact(err.trim(), secrets);
      const authFailed =
        /Authentication failed|could not read Username|terminal prompts disabled|\b401\b|\b403\b/i.test(text);
      reject(new GitError(`${what} failed (exit ${code}): ${text || "no output"}`, authFailed));
    });
  });
}
