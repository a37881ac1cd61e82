// Drover run from its locally built images (scripts/build-images.mjs) under podman: `drover
// server` in the drover image, hardened as the README's `docker run` lines run it, and the CLI
// on the host talking to it.
import { chownSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { until } from "./marked-processes.js";
import { runContainer, type Container } from "./podman.js";
import { freePort, runDrover, testServerDiagnostics } from "./processes.js";

/** `podman run` options of every Drover container in the tests: UID 1000, read-only root, a tmpfs for /tmp. */
export const hardened = [
  "--user",
  "1000:1000",
  "--read-only",
  "--read-only-tmpfs=false",
  "--tmpfs",
  "/tmp:rw,mode=1777",
];

/** Creates `path` (and parents) owned by `uid` (and the same gid), for a container's writable mount. */
export function ownedDir(path: string, uid = 1000): string {
  mkdirSync(path, { recursive: true });
  chownSync(path, uid, uid);
  return path;
}

/** Whether a GET of `url` answers 2xx. */
export async function httpOk(url: string): Promise<boolean> {
  try {
    // eslint-disable-next-line no-restricted-globals -- any URL: an agent's health port as well as the server's
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}

/** A server running in the drover image, and the CLI on the host pointed at it as the admin. */
export interface ServerContainer {
  container: Container;
  url: string;
  adminToken: string;
  /** Runs `drover <args>` on the host against this server. */
  cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
}

/**
 * Starts `drover server` from `image` (hardened, its state in `dir`/server-state mounted at
 * /var/lib/drover, host network) and waits until /readyz answers.
 */
export async function startServerContainer(
  image: string,
  dir: string,
  adminToken = "drv_u_image-admin.0123456789abcdefghij0123456789ab",
): Promise<ServerContainer> {
  // A free port can be taken by another process before the container binds it (the host's
  // network is shared by every test): a server that says so is started again on another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerContainerOnce(image, dir, adminToken);
    } catch (err) {
      if (attempt >= 3 || !/port \d+ on 127\.0\.0\.1 is in use/.test(String(err))) throw err;
    }
  }
}

async function startServerContainerOnce(image: string, dir: string, adminToken: string): Promise<ServerContainer> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const container = runContainer([
    ...hardened,
    "-v",
    `${ownedDir(join(dir, "server-state"))}:/var/lib/drover`,
    "-e",
    `DROVER_PORT=${port}`,
    "-e",
    "DROVER_HOST=127.0.0.1",
    "-e",
    `DROVER_ADMIN_TOKEN=${adminToken}`,
    ...Object.entries(testServerDiagnostics).flatMap(([name, value]) => ["-e", `${name}=${value}`]),
    image,
    "server",
  ]);
  try {
    await until(
      "the server in the drover image to answer /readyz",
      async () => {
        if (container.child.exitCode !== null) throw new Error(`the server container exited:\n${container.output()}`);
        return httpOk(`${url}/readyz`);
      },
      60_000,
    );
  } catch (err) {
    await container.stop(0);
    throw err;
  }
  const env = {
    ...process.env,
    DROVER_URL: url,
    DROVER_TOKEN: adminToken,
    DROVER_CONFIG_DIR: join(dir, "cli-config"),
    NO_COLOR: "1",
  };
  const cli = (args: string[]) => runDrover(args, env);
  return { container, url, adminToken, cli };
}
