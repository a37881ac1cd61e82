/**
 * Runs one container as a host process.
 *
 * Isolation "namespace" (used when `unshare -m` works, i.e. as root): the process gets
 * a private mount namespace whose root is a tmpfs mirroring the host's `/` entry by
 * entry (bind mounts), with every volumeMount bind-mounted at its real mountPath and
 * then `chroot`. Absolute paths in programs therefore work unchanged, and mount points
 * that do not exist on the host are created inside tmpfs layers ("shadowing" the
 * nearest existing host directory), never on the host itself.
 *
 * Isolation "rewrite" (fallback without privileges): the process runs directly on the
 * host; each mountPath occurring in command, args, env values and workingDir is
 * rewritten to the volume's host directory, and `KTC_MOUNT_<n>=<mountPath>=<hostDir>`
 * lists the mapping for programs that build paths themselves.
 */
import type { ChildProcess } from "node:child_process";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { dirname, posix } from "node:path";

export type Isolation = "namespace" | "rewrite";

export interface Mount {
  hostPath: string;
  containerPath: string;
  readOnly: boolean;
}

export interface LaunchSpec {
  argv: string[];
  env: Record<string, string>;
  workingDir: string;
  mounts: Mount[];
  /** An empty per-container directory (namespace isolation mounts the new root on it). */
  rootDir: string;
  isolation: Isolation;
  /** The user the command runs as (the node agent must be root to switch); undefined: this process's. */
  user?: ContainerUser;
  /** readOnlyRootFilesystem: everything but volumes is mounted read-only (namespace isolation). */
  readOnlyRoot?: boolean;
  /**
   * Run as a real container of this podman image instead (`isolation` is then ignored): the
   * image's filesystem as root, `user`, `readOnlyRoot`, `mounts`, `env` and `workingDir`
   * applied by podman with runc; the host's network, as every pod here has.
   */
  podman?: { image: string; env: Record<string, string>; name: string; clusterId: string };
  onOutput(data: Buffer): void;
}

/** Label on every container the podman mode starts, so leftovers can be found. */
export const podmanLabel = "dev.drover.kube-test-cluster";

/**
 * Label naming the cluster (TestCluster.id) that started a container: several clusters run at
 * once on one machine, and a test asking "which containers did my cluster start" must not count
 * another's.
 */
export const podmanClusterLabel = `${podmanLabel}.id`;

/** `podman create` arguments for a launch spec in podman mode. */
export function podmanCreateArgs(spec: LaunchSpec & { podman: NonNullable<LaunchSpec["podman"]> }): string[] {
  const args = [
    "create",
    "--rm",
    "--name",
    spec.podman.name,
    "--label",
    `${podmanLabel}=1`,
    "--label",
    `${podmanClusterLabel}=${spec.podman.clusterId}`,
    "--network",
    "host",
    "--pull",
    "never",
    "--workdir",
    spec.workingDir,
  ];
  if (spec.user) {
    args.push("--user", `${spec.user.uid}:${spec.user.gid}`);
    for (const g of new Set(spec.user.groups)) if (g !== spec.user.gid) args.push("--group-add", String(g));
  }
  // A real runtime adds no writable tmpfs of its own under readOnlyRootFilesystem.
  if (spec.readOnlyRoot) args.push("--read-only", "--read-only-tmpfs=false");
  for (const m of spec.mounts) args.push("--volume", `${m.hostPath}:${m.containerPath}:${m.readOnly ? "ro" : "rw"}`);
  for (const [k, v] of Object.entries(spec.env)) args.push("--env", `${k}=${v}`);
  const [cmd = "", ...rest] = spec.argv;
  args.push("--entrypoint", JSON.stringify([cmd]), spec.podman.image, ...rest);
  return args;
}

/** The effective runAsUser/runAsGroup and supplementary groups (supplementalGroups, fsGroup). */
export interface ContainerUser {
  uid: number;
  gid: number;
  groups: number[];
}

export interface ExitInfo {
  exitCode: number;
  signal: NodeJS.Signals | null;
}

const signalNumbers: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
};

let probed: Isolation | undefined;

/** Namespace isolation if this process may create mount namespaces, else rewrite. */
export function detectIsolation(): Isolation {
  if (probed) return probed;
  const r = spawnSync(
    "unshare",
    [
      "-m",
      "--propagation",
      "private",
      "/bin/sh",
      "-c",
      "mount -t tmpfs ktc-probe /mnt 2>/dev/null || mount -t tmpfs ktc-probe /tmp",
    ],
    { stdio: "ignore", timeout: 5000 },
  );
  probed = r.status === 0 && existsSync("/usr/sbin/chroot") ? "namespace" : "rewrite";
  return probed;
}

// Builds the new root, runs the plan's steps, then chroots and execs the command.
// Arguments: ROOT step... -- WORKDIR CHROOT argv...
const setupScript = String.raw`
set -e
_ktc_path=${"${PATH-}"}; _ktc_had=${"${PATH+x}"}
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
R=$1; shift
mirror() {
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    if [ ! -e "$e" ] && [ ! -L "$e" ]; then continue; fi
    t="$2/${"${e##*/}"}"
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$t"
    elif [ -d "$e" ]; then mkdir "$t"; mount --rbind "$e" "$t"
    else : > "$t"; mount --bind "$e" "$t"; fi
  done
}
mount -t tmpfs -o mode=755 ktc-root "$R"
mirror "" "$R"
while [ "$1" != "--" ]; do
  case "$1" in
    shadow) mount -t tmpfs -o mode=755 ktc-shadow "$R$2"; mirror "$2" "$R$2"; shift 2 ;;
    mkdir) mkdir -p "$R$2"; shift 2 ;;
    touch) mkdir -p "$(dirname "$R$2")"; : > "$R$2"; shift 2 ;;
    bind) mount --bind "$2" "$R$3"; shift 3 ;;
    robind) mount --bind "$2" "$R$3"; mount -o remount,bind,ro "$R$3"; shift 3 ;;
    ro) mount -o remount,bind,ro "$R$2"; shift 2 ;;
    roroot) mount -o remount,ro "$R"; shift ;;
    *) echo "ktc: bad step $1" >&2; exit 1 ;;
  esac
done
shift
WD=$1; CH=$2; US=$3; GR=$4; shift 4
if [ -n "$_ktc_had" ]; then PATH=$_ktc_path; else unset PATH; fi
printf k >&3
exec 3>&-
if [ -n "$US" ]; then exec "$CH" --userspec="$US" --groups="$GR" "$R" /bin/sh -c 'cd "$0" && exec "$@"' "$WD" "$@"; fi
exec "$CH" "$R" /bin/sh -c 'cd "$0" && exec "$@"' "$WD" "$@"
`;

function depth(p: string): number {
  return p.split("/").filter((s) => s !== "").length;
}

function under(path: string, dir: string): string | undefined {
  if (path === dir) return "";
  return path.startsWith(dir === "/" ? "/" : `${dir}/`) ? path.slice(dir === "/" ? 1 : dir.length + 1) : undefined;
}

/**
 * The path with symlinks in its existing part resolved (`/var/run/x` → `/run/x` on
 * Debian). The container sees the host's tree, so the host resolves it the same way;
 * mounting through a symlink would otherwise land outside the new root.
 */
function canonical(p: string): string {
  let existing = posix.normalize(p);
  const rest: string[] = [];
  while (existing !== "/" && !existsSync(existing)) {
    rest.unshift(posix.basename(existing));
    existing = posix.dirname(existing);
  }
  return posix.join(realpathSync(existing), ...rest);
}

/**
 * The setup steps for namespace isolation. Mount points and the working directory
 * that exist on the host are bound over directly; others are created in tmpfs, the
 * nearest existing host ancestor being shadowed (mirrored into a tmpfs) first.
 */
export function planMounts(mounts: Mount[], workingDir: string, readOnlyRoot = false): string[] {
  const sorted = [...mounts]
    .map((m) => ({ ...m, containerPath: canonical(m.containerPath) }))
    .sort((a, b) => depth(a.containerPath) - depth(b.containerPath));
  const shadows = new Set<string>();
  const creates: string[][] = [];
  const binds: string[][] = [];
  const placed: Mount[] = [];
  const ensure = (target: string, isFile: boolean): void => {
    for (const m of [...placed].reverse()) {
      const rest = under(target, m.containerPath);
      if (rest === undefined || rest === "") continue;
      // Inside an earlier volume: create the mount point in the volume's host directory.
      const hostTarget = posix.join(m.hostPath, rest);
      if (!existsSync(hostTarget)) {
        if (isFile) {
          mkdirSync(dirname(hostTarget), { recursive: true });
          writeFileSync(hostTarget, "");
        } else mkdirSync(hostTarget, { recursive: true });
      }
      return;
    }
    if (existsSync(target)) return;
    let ancestor = posix.dirname(target);
    while (ancestor !== "/" && !existsSync(ancestor)) ancestor = posix.dirname(ancestor);
    if (ancestor !== "/" && statSync(ancestor).isDirectory()) shadows.add(ancestor);
    creates.push([isFile ? "touch" : "mkdir", target]);
  };
  for (const m of sorted) {
    const isFile = existsSync(m.hostPath) && !statSync(m.hostPath).isDirectory();
    ensure(m.containerPath, isFile);
    binds.push([m.readOnly ? "robind" : "bind", m.hostPath, m.containerPath]);
    placed.push(m);
  }
  ensure(canonical(workingDir), false);
  const shadowSteps = [...shadows].sort((a, b) => depth(a) - depth(b)).map((s) => ["shadow", s]);
  const roSteps: string[][] = [];
  if (readOnlyRoot) {
    // The host's top-level directories and the shadows over them turn read-only (volumes
    // mounted exactly there keep their own mode); /dev, /proc and /sys stay as a runtime leaves them.
    const volumePaths = new Set(placed.map((m) => m.containerPath));
    const tops = readdirSync("/", { withFileTypes: true })
      .filter((d) => d.isDirectory() && !["dev", "proc", "sys"].includes(d.name))
      .map((d) => `/${d.name}`);
    for (const p of [...tops, ...shadows]) if (!volumePaths.has(p)) roSteps.push(["ro", p]);
    roSteps.push(["roroot"]);
  }
  return [...shadowSteps, ...creates, ...binds, ...roSteps].flat();
}

function rewriter(mounts: Mount[]): (s: string) => string {
  const sorted = [...mounts].sort((a, b) => b.containerPath.length - a.containerPath.length);
  return (s) => {
    for (const m of sorted) {
      const escaped = posix.normalize(m.containerPath).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      s = s.replace(new RegExp(`(?<![\\w.-])${escaped}(?=/|$|[^\\w.-])`, "g"), m.hostPath);
    }
    return s;
  };
}

export class ContainerProcess {
  readonly exited: Promise<ExitInfo>;
  /** Resolves when the command has been exec'd; rejects with the setup error otherwise. */
  readonly started: Promise<void>;
  private readonly child: ChildProcess;
  // The main process exiting ends the container: nothing it started may outlive it
  // (killGroup on "exit"), and the exit is reported once its output is drained ("close").
  private exitInfo: ExitInfo | undefined;
  private readonly isolation: Isolation;
  private readonly rewrite: (s: string) => string;
  private readonly podman: LaunchSpec["podman"];

  constructor(spec: LaunchSpec) {
    this.isolation = spec.isolation;
    this.podman = spec.podman;
    this.rewrite = spec.isolation === "rewrite" ? rewriter(spec.mounts) : (s) => s;
    let setupErr = "";
    let resolveStarted!: () => void;
    let rejectStarted!: (e: Error) => void;
    this.started = new Promise<void>((res, rej) => {
      resolveStarted = res;
      rejectStarted = rej;
    });
    this.started.catch(() => undefined);
    let startedOk = false;
    // The setup writes nothing before its ready byte, but the pipes are read in no fixed
    // order: a quick container's output can be read before that byte. Until it comes, output
    // is held; it is the container's once the setup says it started, else the setup's error.
    let early: Buffer[] = [];
    const output = (d: Buffer): void => {
      if (startedOk) spec.onOutput(d);
      else early.push(d);
    };
    const markStarted = (): void => {
      startedOk = true;
      for (const d of early) spec.onOutput(d);
      early = [];
      resolveStarted();
    };
    if (spec.podman) {
      // Created first, so a failure to create (a missing image, a bad mount) is a start error;
      // then started attached: the child's output is the container's, its exit code the container's.
      // The create's messages are kept back: on success they are not the container's output.
      const podman = spec.podman;
      const script =
        'e=$(podman "$@" 2>&1 >/dev/null) || { printf "%s\\n" "$e" >&2; exit 128; }; ' +
        'printf k >&3; exec 3>&-; exec podman start --attach "$KTC_PODMAN_NAME"';
      this.child = spawn("/bin/sh", ["-c", script, "ktc-podman", ...podmanCreateArgs({ ...spec, podman })], {
        env: { ...process.env, ...podman.env, KTC_PODMAN_NAME: podman.name },
        stdio: ["ignore", "pipe", "pipe", "pipe"],
      });
      const ready = this.child.stdio[3];
      ready?.on("data", markStarted);
      ready?.on("error", () => undefined);
    } else if (spec.isolation === "namespace") {
      mkdirSync(spec.rootDir, { recursive: true });
      const steps = planMounts(spec.mounts, spec.workingDir, spec.readOnlyRoot === true);
      const u = spec.user;
      const userArgs = u ? [`${u.uid}:${u.gid}`, [...new Set([u.gid, ...u.groups])].join(",")] : ["", ""];
      this.child = spawn(
        "unshare",
        [
          "-m",
          "--propagation",
          "private",
          "/bin/sh",
          "-c",
          setupScript,
          "ktc-setup",
          spec.rootDir,
          ...steps,
          "--",
          spec.workingDir,
          "/usr/sbin/chroot",
          ...userArgs,
          ...spec.argv,
        ],
        {
          env: spec.env,
          stdio: ["ignore", "pipe", "pipe", "pipe"],
          detached: true,
        },
      );
      const ready = this.child.stdio[3];
      ready?.on("data", markStarted);
      ready?.on("error", () => undefined);
    } else {
      const rw = rewriter(spec.mounts);
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(spec.env)) env[k] = rw(v);
      spec.mounts.forEach((m, i) => {
        env[`KTC_MOUNT_${i}`] = `${m.containerPath}=${m.hostPath}`;
      });
      let cwd = rw(spec.workingDir);
      if (!existsSync(cwd)) {
        try {
          mkdirSync(cwd, { recursive: true });
        } catch {
          cwd = spec.rootDir;
          mkdirSync(cwd, { recursive: true });
        }
      }
      const [cmd = "", ...args] = spec.argv.map(rw);
      const u = spec.user;
      this.child = spawn(cmd, args, {
        env,
        cwd,
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
        ...(u && process.getuid?.() === 0 ? { uid: u.uid, gid: u.gid } : {}),
      });
      this.child.on("spawn", markStarted);
      this.child.on("error", (e) => {
        setupErr = `exec: "${cmd}": ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "executable file not found in $PATH" : e.message}`;
      });
    }
    this.child.stdout?.on("data", output);
    this.child.stderr?.on("data", output);
    this.exited = new Promise<ExitInfo>((resolve) => {
      let done = false;
      const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
        if (done) return;
        done = true;
        this.exitInfo = { exitCode: code ?? (signal ? 128 + (signalNumbers[signal] ?? 9) : 1), signal };
        setupErr += Buffer.concat(early).toString();
        if (!startedOk) rejectStarted(new Error(setupErr.trim() || `container setup failed (exit ${String(code)})`));
        resolve(this.exitInfo);
      };
      this.child.on("exit", () => this.killGroup());
      this.child.on("close", finish);
      this.child.on("error", () => finish(127, null));
    });
  }

  /**
   * argv running `command` inside this container, as `user` (exec probes): nsenter into
   * its mount namespace, root and working directory; under rewrite isolation, directly.
   */
  execArgv(command: string[], user: ContainerUser | undefined): string[] {
    if (this.podman) {
      const envPairs = Object.entries(this.podman.env).map(([k, v]) => `${k}=${v}`);
      return [
        "/usr/bin/env",
        ...envPairs,
        "podman",
        "exec",
        ...(user ? ["--user", `${user.uid}:${user.gid}`] : []),
        this.podman.name,
        ...command,
      ];
    }
    if (this.isolation === "namespace" && this.child.pid !== undefined) {
      return [
        "nsenter",
        "-t",
        String(this.child.pid),
        "-m",
        "-r",
        "-w",
        ...(user ? ["-S", String(user.uid), "-G", String(user.gid)] : []),
        "--",
        ...command,
      ];
    }
    return [
      ...(user && process.getuid?.() === 0
        ? [
            "setpriv",
            `--reuid=${user.uid}`,
            `--regid=${user.gid}`,
            `--groups=${[user.gid, ...user.groups].join(",")}`,
            "--",
          ]
        : []),
      ...command.map(this.rewrite),
    ];
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** Signals the container's main process (as the runtime does for stop signals). */
  signal(sig: NodeJS.Signals): void {
    if (this.child.pid === undefined || this.exitInfo) return;
    if (this.podman) {
      spawn("podman", ["kill", "--signal", sig, this.podman.name], {
        env: { ...process.env, ...this.podman.env },
        stdio: "ignore",
      }).on("error", () => undefined);
      return;
    }
    try {
      process.kill(this.child.pid, sig);
    } catch {
      // already gone
    }
  }

  /** SIGKILL to every process of the container. */
  killGroup(): void {
    if (this.podman) {
      // Removing the container kills all of its processes; the attached child then exits.
      if (this.exitInfo) return;
      spawn("podman", ["rm", "--force", "--time", "0", "--ignore", this.podman.name], {
        env: { ...process.env, ...this.podman.env },
        stdio: "ignore",
      }).on("error", () => undefined);
      return;
    }
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}
