import { spawnSync } from "node:child_process";

/**
 * Image names. Nothing is pulled: an image selects only simulated pull outcomes and,
 * when the cluster is told what an image contains, its entrypoint/cmd/env/workdir.
 */

// The distribution/reference grammar that container runtimes apply.
const domainComponent = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const domain = `(?:${domainComponent}(?:\\.${domainComponent})*(?::[0-9]+)?|\\[[a-fA-F0-9:]+\\](?::[0-9]+)?)`;
const pathComponent = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*";
const name = `(?:${domain}/)?${pathComponent}(?:/${pathComponent})*`;
const tag = "[\\w][\\w.-]{0,127}";
const digest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}";
const reference = new RegExp(`^(${name})(?::(${tag}))?(?:@(${digest}))?$`);

export function isValidImageName(image: string): boolean {
  const m = reference.exec(image);
  return m !== null && (m[1]?.length ?? 0) <= 255;
}

/** `docker.io/library/busybox:latest` for `busybox`, as kubelet reports names. */
export function normalizeImage(image: string): string {
  const m = reference.exec(image);
  if (!m) return image;
  let repo = m[1] ?? image;
  const first = repo.split("/")[0] ?? "";
  if (!repo.includes("/") || !(first.includes(".") || first.includes(":") || first === "localhost")) {
    repo = repo.includes("/") ? `docker.io/${repo}` : `docker.io/library/${repo}`;
  }
  return `${repo}${m[3] ? `@${m[3]}` : `:${m[2] ?? "latest"}`}`;
}

export function repositoryOf(image: string): string {
  const m = reference.exec(image);
  return m?.[1] ?? image;
}

/** What an image "contains", for containers that set no command. */
export interface ImageConfig {
  entrypoint?: string[];
  cmd?: string[];
  workingDir?: string;
  env?: Record<string, string>;
  /** The image's USER, "uid" or "uid:gid" (a name is "non-numeric" to runAsNonRoot); default root. */
  user?: string;
  /**
   * Host paths that belong to the image's own files: they stay visible even under a volume
   * mounted over a parent directory (a repository checked out under /tmp, say, beneath an
   * emptyDir at /tmp), as files baked into a real image would be at their own paths.
   */
  paths?: string[];
  /**
   * A local podman image this image runs as (the node agent's podman mode, with the cluster's
   * `podman` option): its containers become real containers of that image, and its
   * entrypoint, cmd, env, workingDir and user default to the podman image's own.
   */
  podman?: string;
  /**
   * Host paths bind-mounted read-only at their own paths into the real containers of this image
   * (podman mode): what a test's workloads need beside the image (a tool, fixtures), provided by
   * the node as a hostPath would be, without baking test files into the image.
   */
  podmanMounts?: string[];
  /**
   * Executables the image has at absolute paths, as host programs standing in for them: a
   * container whose command starts with such a path runs the stand-in (a process container
   * sees the host's files, which lack the image's `/usr/bin/tini`, say). Not used by podman.
   */
  executables?: Record<string, string>;
}

/** How containers of an image run under podman: the local image and podman's environment. */
export interface PodmanLaunch {
  image: string;
  env: Record<string, string>;
  /** The owning cluster's id, put on the container as a label so one cluster can tell its containers from another's. */
  clusterId: string;
}

export type PullOutcome = { ok: true } | { ok: false; reason: "InvalidImageName" | "ErrImagePull"; message: string };

export class ImageCatalog {
  private readonly unpullable = new Set<string>();

  private readonly inspected = new Map<string, ImageConfig>();

  constructor(
    private readonly configs: Record<string, ImageConfig>,
    unpullable: string[],
    /** podman's environment (its configuration files); images with `podman` need it. */
    private readonly podmanEnv?: Record<string, string>,
    /** The cluster's id, labelled on its podman containers. */
    private readonly clusterId = "",
  ) {
    for (const i of unpullable) this.unpullable.add(i);
  }

  /** The podman image and environment for containers of `image`, if it runs under podman. */
  podman(image: string): PodmanLaunch | undefined {
    const local = this.configured(image).podman;
    if (local === undefined) return undefined;
    if (!this.podmanEnv)
      throw new Error(`image ${image} maps to the podman image ${local}, but the cluster has no podman option`);
    return { image: local, env: this.podmanEnv, clusterId: this.clusterId };
  }

  setPullable(image: string, pullable: boolean): void {
    if (pullable) this.unpullable.delete(image);
    else this.unpullable.add(image);
  }

  pull(image: string): PullOutcome {
    if (!isValidImageName(image)) {
      return {
        ok: false,
        reason: "InvalidImageName",
        message: `Failed to apply default image tag "${image}": couldn't parse image name "${image}": invalid reference format`,
      };
    }
    const tagged = /:pull-fails$/.test(image) || this.unpullable.has(image) || this.unpullable.has(repositoryOf(image));
    if (tagged) {
      const full = normalizeImage(image);
      return {
        ok: false,
        reason: "ErrImagePull",
        message: `failed to pull and unpack image "${full}": failed to resolve reference "${full}": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`,
      };
    }
    return { ok: true };
  }

  config(image: string): ImageConfig {
    const own = this.configured(image);
    if (own.podman === undefined) return own;
    return { ...this.inspect(own.podman), ...own };
  }

  private configured(image: string): ImageConfig {
    return this.configs[image] ?? this.configs[repositoryOf(image)] ?? {};
  }

  /** The podman image's own entrypoint, cmd, env, workingDir and user (read once). */
  private inspect(local: string): ImageConfig {
    let found = this.inspected.get(local);
    if (found) return found;
    const r = spawnSync("podman", ["image", "inspect", "--format", "{{json .Config}}", local], {
      encoding: "utf8",
      env: { ...process.env, ...(this.podmanEnv ?? {}) },
    });
    if (r.status !== 0) throw new Error(`podman image inspect ${local} failed: ${r.stderr}`);
    const c = JSON.parse(r.stdout) as {
      Entrypoint?: string[] | null;
      Cmd?: string[] | null;
      Env?: string[] | null;
      WorkingDir?: string;
      User?: string;
    };
    found = {};
    if (c.Entrypoint && c.Entrypoint.length > 0) found.entrypoint = c.Entrypoint;
    if (c.Cmd && c.Cmd.length > 0) found.cmd = c.Cmd;
    if (c.WorkingDir) found.workingDir = c.WorkingDir;
    if (c.User) found.user = c.User;
    if (c.Env)
      found.env = Object.fromEntries(c.Env.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
    this.inspected.set(local, found);
    return found;
  }
}
