import { spawn, spawnSync } from "node:child_process";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { routes } from "@drover/protocol";
import { adminToken, client, repoRoot, sleep, startServerProc, track, trackStop } from "./harness.js";
import { median, type Figure } from "./report.js";

interface Built {
  env: Record<string, string>;
  images: { drover: string; runner: string };
  timingsMs: Record<string, number>;
  totalMs: number;
}

/** Builds (or finds) the local images with scripts/build-images.mjs. */
function buildImages(): Built {
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts", "build-images.mjs")], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 16 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`scripts/build-images.mjs failed (exit ${r.status})`);
  return JSON.parse(r.stdout) as Built;
}

function podman(env: Record<string, string>, args: string[]): string {
  const r = spawnSync("podman", args, { env: { ...process.env, ...env }, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`podman ${args.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
}

async function readyWithin(url: string, deadlineMs: number): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      await client(url).call(routes.readyz, {});
      return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${url} never became ready`);
    await sleep(10);
  }
}

/** `podman run` of `drover server` (read-only root, UID 1000) until /readyz answers. */
async function containerStartMs(env: Record<string, string>, image: string, port: number): Promise<number> {
  const name = `drover-bench-${port}`;
  const state = mkdtempSync(join(tmpdir(), "drover-bench-image-"));
  chownSync(state, 1000, 1000);
  const start = Date.now();
  const child = spawn(
    "podman",
    [
      "run",
      "--rm",
      "--name",
      name,
      "--user",
      "1000:1000",
      "--read-only",
      "--read-only-tmpfs=false",
      "--tmpfs",
      "/tmp:rw,mode=1777",
      "-v",
      `${state}:/var/lib/drover`,
      "-e",
      `DROVER_PORT=${port}`,
      "-e",
      "DROVER_HOST=127.0.0.1",
      "-e",
      `DROVER_ADMIN_TOKEN=${adminToken}`,
      image,
      "server",
    ],
    { env: { ...process.env, ...env }, stdio: "ignore" },
  );
  track(child);
  // Killing the podman client leaves its container running: an abandoned bench removes it too.
  const forget = trackStop(() => podman(env, ["rm", "-f", "-t", "0", name]));
  try {
    await readyWithin(`http://127.0.0.1:${port}`, 60_000);
    return Date.now() - start;
  } finally {
    podman(env, ["rm", "-f", "-t", "2", name]);
    forget();
    await new Promise((r) => (child.exitCode === null ? child.once("exit", r) : r(undefined)));
    rmSync(state, { recursive: true, force: true });
  }
}

/**
 * Size of the drover and runner images, and how long `drover server` takes from `podman run`
 * to ready, beside the same server started as a host process. The build itself (warm: only
 * the inputs hashed) is noted with the time each step took.
 */
export async function benchImages(): Promise<Figure[]> {
  const built = buildImages();
  const sizeMb = (image: string) =>
    Number(podman(built.env, ["image", "inspect", "--format", "{{.Size}}", image]).trim()) / 1e6;
  const hostStarts: number[] = [];
  const containerStarts: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    const server = await startServerProc();
    await readyWithin(server.url, 30_000);
    hostStarts.push(Date.now() - t0);
    await server.stop();
    containerStarts.push(
      await containerStartMs(built.env, built.images.drover, 20_000 + Math.floor(Math.random() * 20_000)),
    );
  }
  const buildNote = `build-images.mjs took ${built.totalMs} ms here (${Object.entries(built.timingsMs)
    .map(([k, v]) => `${k} ${v} ms`)
    .join(", ")})`;
  return [
    {
      bench: "images",
      metric: "drover image size",
      unit: "MB",
      value: sizeMb(built.images.drover),
      baseline: null,
      baselineLabel: "",
      target: "—",
      met: null,
      note: `${built.images.drover}; ${buildNote}`,
    },
    {
      bench: "images",
      metric: "runner image size",
      unit: "MB",
      value: sizeMb(built.images.runner),
      baseline: null,
      baselineLabel: "",
      target: "—",
      met: null,
      note: built.images.runner,
    },
    {
      bench: "images",
      metric: "drover server start (podman run → ready), median of 5",
      unit: "ms",
      value: median(containerStarts),
      baseline: median(hostStarts),
      baselineLabel: "host process",
      target: "—",
      met: null,
      note: `container: ${containerStarts.join(", ")} ms; host: ${hostStarts.join(", ")} ms`,
    },
  ];
}
