// Real containers for the tests: rootful podman with the project's own configuration (written by
// scripts/build-images.mjs under the cache directory: runc, cgroupfs, explicit ulimits, host
// networking, its own storage), the locally built images, containers run as child processes,
// and podman's Docker Engine API on a unix socket.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnProcess, type Proc } from "./processes.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const buildScript = join(repo, "scripts", "build-images.mjs");

/** Names of the locally built images (tags carry a hash of their inputs). */
export interface LocalImages {
  /** The debootstrapped Debian bookworm base. */
  debian: string;
  /** The Debian base plus Node 24 (the NODE_IMAGE the drover image builds from). */
  node: string;
  /** An image holding the host's terraform at /bin/terraform. */
  terraform: string;
  /** deploy/docker/Dockerfile. */
  drover: string;
  /** deploy/docker/runner.Dockerfile. */
  runner: string;
}

/** What ensureImages found or built. */
export interface BuiltImages {
  images: LocalImages;
  /** Environment that points podman at the project's configuration. */
  env: Record<string, string>;
  /** Milliseconds each build step took in the run that answered (near 0 when cached). */
  timingsMs: Record<string, number>;
  /** Milliseconds the whole call took, waiting for another builder's lock included. */
  totalMs: number;
}

/** Why real-container tests cannot run here, or undefined when they can. */
export function podmanUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return "the container tests need root (rootful podman)";
  for (const tool of ["podman", "runc", "debootstrap", "flock"]) {
    const found = spawnSync("sh", ["-c", `command -v ${tool} || test -x /usr/sbin/${tool}`]).status === 0;
    if (!found) return `${tool} is not installed (.ci/run installs podman, runc and debootstrap)`;
  }
  return undefined;
}

let cachedEnv: Record<string, string> | undefined;

/** The podman environment (configuration files written, nothing built). */
export function podmanEnv(): Record<string, string> {
  if (cachedEnv) return cachedEnv;
  const r = spawnSync(process.execPath, [buildScript, "--env"], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`build-images --env failed:\n${r.stderr}`);
  cachedEnv = (JSON.parse(r.stdout) as { env: Record<string, string> }).env;
  return cachedEnv;
}

let building: Promise<BuiltImages> | undefined;

/**
 * Builds the drover and runner images if their inputs changed, else returns at once. Test files
 * running at the same time take turns on the script's lock file: one builds, the others then
 * find the images built.
 */
export function ensureImages(): Promise<BuiltImages> {
  building ??= new Promise<BuiltImages>((resolve, reject) => {
    const start = Date.now();
    const child = spawn(process.execPath, [buildScript], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`building the images failed (exit ${code}); last output:\n${stderr}`));
      const out = JSON.parse(stdout) as Omit<BuiltImages, "totalMs">;
      cachedEnv = out.env;
      resolve({ ...out, totalMs: Date.now() - start });
    });
  });
  return building;
}

/** The result of a podman command that ran to its end. */
export interface PodmanResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs one podman command with the project's configuration. */
export function podman(args: string[], options: { timeoutMs?: number; input?: string } = {}): Promise<PodmanResult> {
  return new Promise((resolve, reject) => {
    const child = spawn("podman", args, { env: { ...process.env, ...podmanEnv() }, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.stdin.end(options.input ?? "");
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? 1, stdout, stderr });
    });
  });
}

/** Like podman(), but throws with the output when the command fails. */
export async function podmanOk(args: string[], options: { timeoutMs?: number; input?: string } = {}): Promise<string> {
  const r = await podman(args, options);
  if (r.code !== 0) throw new Error(`podman ${args.join(" ")} failed (exit ${r.code}):\n${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Label on every container the tests start, so a leftover can be found and removed. */
export const testLabel = "dev.drover.test";

/** A container running in the foreground of a `podman run` child process. */
export interface Container extends Omit<Proc, "stop"> {
  name: string;
  /** Stops the container (SIGTERM, then SIGKILL after the grace) and removes it. */
  stop(graceSeconds?: number): Promise<void>;
}

/**
 * Starts `podman run --rm --name <random> <args…>`; `args` are run's options followed by the
 * image and its command. The container is labelled with testLabel.
 */
export function runContainer(args: string[], prefix = "drover-test"): Container {
  const name = `${prefix}-${randomBytes(4).toString("hex")}`;
  const proc = spawnProcess("podman", ["run", "--rm", "--name", name, "--label", `${testLabel}=1`, ...args], {
    ...process.env,
    ...podmanEnv(),
  });
  return {
    ...proc,
    name,
    // A container's first start may unpack image layers: a minute rather than spawnProcess's 20 s.
    waitFor: (pattern, timeoutMs = 60_000) => proc.waitFor(pattern, timeoutMs),
    async stop(graceSeconds = 10) {
      if (proc.child.exitCode === null && proc.child.signalCode === null)
        await podman(["stop", "-t", String(graceSeconds), name]);
      await proc.exited;
      await podman(["rm", "-f", "--ignore", name]);
    },
  };
}

/** Runs a container to its end and returns its exit code and output. */
export async function runToEnd(args: string[], timeoutMs = 120_000): Promise<{ code: number | null; output: string }> {
  const c = runContainer(args);
  const timer = setTimeout(() => void c.stop(0), timeoutMs);
  const { code } = await c.exited;
  clearTimeout(timer);
  return { code, output: c.output() };
}

/** podman's Docker Engine API, served on a unix socket until stop(). */
export interface DockerApi {
  socketPath: string;
  stop(): Promise<void>;
}

/** Starts `podman system service --time=0` on `socketPath` and waits until it answers /_ping. */
export async function startDockerApi(socketPath: string, timeoutMs = 30_000): Promise<DockerApi> {
  // Run beside the socket: conmon leaves files such as an empty `oom` marker in its working directory, which would
  // otherwise be the repository's root.
  const child = spawn("podman", ["system", "service", "--time=0", `unix://${socketPath}`], {
    cwd: dirname(socketPath),
    env: { ...process.env, ...podmanEnv() },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-10_000)));
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await exited;
  };
  const deadline = Date.now() + timeoutMs;
  const { request } = await import("node:http");
  const ping = () =>
    new Promise<boolean>((resolve) => {
      const req = request({ socketPath, path: "/_ping", method: "GET" }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on("error", () => resolve(false));
      req.end();
    });
  for (;;) {
    if (existsSync(socketPath) && (await ping())) return { socketPath, stop };
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`podman system service did not answer on ${socketPath}:\n${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
