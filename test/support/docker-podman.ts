import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DockerEngine } from "@drover/agent/docker";

/**
 * A Docker Engine API for the docker driver's tests: `podman system service` on a socket of
 * this test file's own, with a podman configuration and storage of the project's (never the
 * machine's files). Its runner image is made offline: busybox, its libraries and the host's
 * terraform, imported as a root filesystem.
 */
export interface DockerApiForTests {
  socketPath: string;
  /** `unix://…` for DROVER_AGENT_DOCKER_HOST. */
  host: string;
  image: string;
  engine: DockerEngine;
  /** podman with the project's configuration (for checks the API does not answer). */
  podman(args: string[]): string;
  stop(): Promise<void>;
}

const root = join(tmpdir(), "drover-docker-driver-podman");
export const testRunnerImage = "localhost/drover-docker-driver-runner:2";

function podmanEnv(): NodeJS.ProcessEnv {
  const conf = join(root, "conf");
  mkdirSync(conf, { recursive: true });
  // Rootful podman here needs runc, cgroupfs and explicit ulimits (crun fails on this machine's cgroups).
  writeFileSync(
    join(conf, "containers.conf"),
    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n',
  );
  writeFileSync(join(conf, "storage.conf"), `[storage]\ndriver = "overlay"\nrunroot = "${join(root, "run")}"\ngraphroot = "${join(root, "storage")}"\n`);
  writeFileSync(join(conf, "registries.conf"), "unqualified-search-registries = []\n");
  return {
    ...process.env,
    CONTAINERS_CONF: join(conf, "containers.conf"),
    CONTAINERS_STORAGE_CONF: join(conf, "storage.conf"),
    CONTAINERS_REGISTRIES_CONF: join(conf, "registries.conf"),
  };
}

function buildImage(env: NodeJS.ProcessEnv): void {
  try {
    execFileSync("podman", ["image", "exists", testRunnerImage], { env, stdio: "ignore" });
    return;
  } catch {
    // not there yet
  }
  const fs = mkdtempSync(join(tmpdir(), "drover-rootfs-"));
  try {
    for (const d of ["bin", "lib/x86_64-linux-gnu", "lib64", "usr/local/bin", "tmp", "etc", "proc", "sys", "dev"]) mkdirSync(join(fs, d), { recursive: true });
    cpSync("/usr/bin/busybox", join(fs, "bin/busybox"), { dereference: true });
    for (const lib of ["libresolv.so.2", "libc.so.6"]) cpSync(`/lib/x86_64-linux-gnu/${lib}`, join(fs, "lib/x86_64-linux-gnu", lib), { dereference: true });
    cpSync("/lib64/ld-linux-x86-64.so.2", join(fs, "lib64/ld-linux-x86-64.so.2"), { dereference: true });
    for (const tool of ["sh", "awk", "date", "stat", "mv", "cat", "sleep", "mkdir", "kill", "dd", "echo", "rm", "ls", "touch", "head", "tail", "env", "id", "sed", "grep", "test", "[", "wc", "tr", "seq", "true", "false", "cp", "chmod"]) symlinkSync("busybox", join(fs, "bin", tool));
    cpSync("/usr/local/bin/terraform", join(fs, "usr/local/bin/terraform"));
    chmodSync(join(fs, "tmp"), 0o1777);
    writeFileSync(join(fs, "etc/passwd"), "root:x:0:0::/root:/bin/sh\n");
    execFileSync("sh", ["-c", `tar -C '${fs}' -c . | podman import - ${testRunnerImage}`], { env, stdio: "ignore" });
  } finally {
    rmSync(fs, { recursive: true, force: true });
  }
}

/** Starts podman's Docker API on a new socket, with the test runner image in its storage. */
export async function startDockerApi(): Promise<DockerApiForTests> {
  const env = podmanEnv();
  buildImage(env);
  const sockDir = mkdtempSync(join(tmpdir(), "drover-docker-sock-"));
  const socketPath = join(sockDir, "docker.sock");
  const service: ChildProcess = spawn("podman", ["system", "service", "--time=0", `unix://${socketPath}`], { env, stdio: "ignore" });
  const engine = new DockerEngine(socketPath);
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (existsSync(socketPath)) {
      try {
        await engine.version(AbortSignal.timeout(2_000));
        break;
      } catch {
        // still starting
      }
    }
    if (service.exitCode !== null || Date.now() > deadline) throw new Error("podman system service did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    socketPath,
    host: `unix://${socketPath}`,
    image: testRunnerImage,
    engine,
    podman: (args) => execFileSync("podman", args, { env, encoding: "utf8" }),
    async stop() {
      await engine.close();
      const exited = new Promise((r) => service.once("exit", r));
      service.kill("SIGTERM");
      await exited;
      rmSync(sockDir, { recursive: true, force: true });
    },
  };
}
