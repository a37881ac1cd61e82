// Runs every compiled test file with Node's test runner, with one throwaway PostgreSQL
// cluster shared by the run (each test file creates its own database in it).
//
//   node scripts/run-tests.mjs [--lint | --lint-promises] [substring-of-compiled-path | path/to/file.test.js ...]
//
// --lint (what `npm test` passes) runs the repository's lints beside the tests, at low priority,
// so they cost the suite little wall time; once the tests end, the lints still running get this
// script's own priority back where the system allows it (root), so on a machine busy with other
// work they are not starved at the end of the run. The lints: the type-aware lint
// (eslint.promises.config.js, which holds every rule of `eslint .` plus the two promise rules,
// so `eslint .` is not run twice) and `prettier --check`. --lint-promises runs the type-aware
// lint alone. The run fails if a lint does, its findings printed last. DROVER_TEST_LINT_DIR lints
// another directory (the runner's own tests use it; its eslint.promises.config.js is then that
// directory's).
//
// DROVER_TEST_TIMEOUT_MS (default 300000) bounds every test and hook that sets no timeout of
// its own (see test-timeout.mjs). The PostgreSQL cluster is stopped however the run ends:
// normally, on SIGINT/SIGTERM/SIGHUP (forwarded to the tests first), or on a crash of this script.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { constants, getPriority, setPriority, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startPostgres } from "./postgres.mjs";
import { orderByDuration, readDurations } from "./test-order.mjs";

const defaultTimeoutMs = 5 * 60 * 1000;
/** How long the tests get to end after a forwarded signal before they are killed. */
const interruptGraceMs = 10_000;

function findTests(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) findTests(path, out);
    else if (name.endsWith(".test.js")) out.push(path);
  }
  return out;
}

const rawTimeout = process.env.DROVER_TEST_TIMEOUT_MS ?? String(defaultTimeoutMs);
const timeoutMs = Number(rawTimeout);
if (!/^\d+$/.test(rawTimeout) || !Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) {
  console.error(
    `DROVER_TEST_TIMEOUT_MS must be a positive whole number of milliseconds; got ${JSON.stringify(rawTimeout)}`,
  );
  process.exit(2);
}

const lintAll = process.argv.includes("--lint");
const lintPromises = lintAll || process.argv.includes("--lint-promises");
const args = process.argv.slice(2).filter((a) => a !== "--lint-promises" && a !== "--lint");
// An argument naming an existing file is run as given; any other is a substring filter.
const named = args.filter((a) => a.endsWith(".js") && existsSync(a) && statSync(a).isFile());
const filter = args.filter((a) => !named.includes(a));
let files = [];
if (filter.length > 0 || named.length === 0) {
  files = [
    ...readdirSync("packages").flatMap((p) => findTests(join("packages", p, "dist", "test"))),
    ...findTests(join("deploy", "pulumi", "dist", "test")),
    ...findTests(join("test", "dist")),
  ];
  if (filter.length > 0) files = files.filter((f) => filter.some((s) => f.includes(s)));
}
files.push(...named);
if (files.length === 0) {
  console.error("no test files found; run `tsc -b` first");
  process.exit(1);
}
// Longest first (scripts/test-durations.json), so the lanes end together.
files = orderByDuration(
  files.map((f) => resolve(f)),
  readDurations(),
);

let pg;
let child;
/** Where test files record that they stayed up after their tests; removed however this process ends. */
let lingerDir;
/** The lints still running, killed if this process ends first. */
const lintChildren = new Set();
function stopPostgres() {
  const cluster = pg;
  pg = undefined;
  if (!cluster) return;
  try {
    cluster.stop();
  } catch (err) {
    console.error(
      `[run-tests] could not stop the test PostgreSQL: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}
// The last line of defence: runs on every exit of this process that is not a SIGKILL.
process.on("exit", () => {
  for (const lint of lintChildren) if (lint.exitCode === null) lint.kill("SIGKILL");
  stopPostgres();
  if (lingerDir) rmSync(lingerDir, { recursive: true, force: true });
});
process.on("uncaughtException", (err) => {
  console.error("[run-tests] crashed:", err);
  killTests("SIGKILL");
  stopPostgres();
  process.exit(1);
});

/** Signals the whole test process group (the runner and every test file it started). */
function killTests(signal) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/**
 * When the selection holds tests that run the locally built images, builds them in the
 * background from the start (the tests wait on the build's lock), so a cold build overlaps
 * the tests that do not need it. Output goes to <cache>/images-build.log.
 */
function prebuildImages() {
  // The chart tests' clusters run the images too (chartImages in test/support/chart-cluster.ts).
  if (
    !files.some((f) =>
      /(images|podman|docker|pulumi-cluster)[^/]*\.test\.js$|\/charts\/[^/]*(install|upgrade|disruptions|cluster)[^/]*\.test\.js$/.test(
        f,
      ),
    )
  )
    return;
  if (
    process.getuid?.() !== 0 ||
    spawnSync("sh", ["-c", "command -v podman && command -v debootstrap || test -x /usr/sbin/debootstrap"], {
      stdio: "ignore",
    }).status !== 0
  )
    return;
  const script = join(dirname(fileURLToPath(import.meta.url)), "build-images.mjs");
  const log = spawnSync(process.execPath, [script, "--env"], { encoding: "utf8" });
  if (log.status !== 0) return;
  const dir = dirname(JSON.parse(log.stdout).lock);
  const out = openSync(join(dir, "images-build.log"), "w");
  const builder = spawn(process.execPath, [script], { stdio: ["ignore", "ignore", out], detached: true });
  builder.unref();
  console.error(`[run-tests] building the images in the background (log: ${join(dir, "images-build.log")})`);
}

let interrupted = false;
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    if (interrupted) return;
    interrupted = true;
    console.error(`[run-tests] ${signal}: stopping the tests and the test PostgreSQL`);
    const code = 128 + constants.signals[signal];
    if (!child) process.exit(code);
    killTests(signal);
    const force = setTimeout(() => killTests("SIGKILL"), interruptGraceMs);
    child.once("exit", () => {
      clearTimeout(force);
      process.exit(code);
    });
  });
}

/**
 * Starts one lint (`args` to node) in the background at low priority, in `dir`; resolves with
 * its name, exit code and output once it ends.
 */
function startLint(name, args, dir) {
  const lint = spawn("nice", ["-n", "10", process.execPath, ...args], { stdio: ["ignore", "pipe", "pipe"], cwd: dir });
  lintChildren.add(lint);
  let output = "";
  lint.stdout.on("data", (d) => (output += d));
  lint.stderr.on("data", (d) => (output += d));
  return new Promise((resolve) =>
    lint.on("exit", (c, s) => {
      lintChildren.delete(lint);
      resolve({ name, code: c ?? (s ? 1 : 0), output });
    }),
  );
}

/**
 * Gives the lints still running this script's priority: the tests they yielded to have ended.
 * Each of a lint's threads has its own nice value on Linux, so every one is set. Raising a
 * priority needs privilege; without it the lints keep theirs.
 */
function raiseLints() {
  const priority = getPriority();
  for (const lint of lintChildren) {
    let threads = [String(lint.pid)];
    try {
      threads = readdirSync(`/proc/${lint.pid}/task`);
    } catch {
      // Not Linux, or the lint just ended.
    }
    for (const tid of threads) {
      try {
        setPriority(Number(tid), priority);
      } catch {
        // EACCES without privilege, ESRCH for a thread that ended: the lint goes on as it was.
      }
    }
  }
}

/** The lints this run was asked for, started at once; resolves with each one's result. */
function startLints() {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const dir = resolve(process.env.DROVER_TEST_LINT_DIR || root);
  const bin = (pkg, file) => join(root, "node_modules", pkg, "bin", file);
  const lints = [
    startLint(
      "type-aware lint (eslint.promises.config.js)",
      [bin("eslint", "eslint.js"), "-c", join(dir, "eslint.promises.config.js"), dir],
      dir,
    ),
  ];
  if (lintAll)
    lints.push(
      startLint(
        "prettier --check",
        [bin("prettier", "prettier.cjs"), "--check", "**/*.{ts,tsx,mts,mjs,js,cjs,css}"],
        dir,
      ),
    );
  return Promise.all(lints);
}

const lintsDone = lintPromises ? startLints() : undefined;
pg = await startPostgres();
prebuildImages();
const scripts = dirname(fileURLToPath(import.meta.url));
lingerDir = mkdtempSync(join(tmpdir(), "drover-test-linger-"));
const lingerLog = join(lingerDir, "linger.log");
const env = {
  ...process.env,
  DROVER_TEST_LINGER_LOG: lingerLog,
  DROVER_TEST_PG_URL: pg.url,
  DROVER_TEST_TIMEOUT_MS: String(timeoutMs),
  CHECKPOINT_DISABLE: "1",
};
// Its own process group, so an interrupt can reach every test file, not just the runner.
// Three files at a time on two cores: the suite is CPU-bound (decision 0057), and four at a time
// took as long. test-files.mjs runs them in the order given (node --test would sort them by
// path); the runner passes the --import on to them.
child = spawn(
  process.execPath,
  ["--import", join(scripts, "test-timeout.mjs"), join(scripts, "test-files.mjs"), "--concurrency=3", ...files],
  { stdio: "inherit", env, detached: true },
);
let code = await new Promise((resolve) => child.on("exit", (c, s) => resolve(c ?? (s ? 1 : 0))));
if (existsSync(lingerLog))
  console.error(
    `[run-tests] files that stayed up after their tests (a timer or handle left behind, or a slow after hook): ${readFileSync(lingerLog, "utf8").trim().split("\n").join(", ")}`,
  );
if (lintsDone && !interrupted) {
  raiseLints();
  for (const lint of await lintsDone) {
    if (lint.code === 0) console.error(`[run-tests] ${lint.name}: passed`);
    else {
      console.error(`[run-tests] ${lint.name} failed:\n${lint.output}`);
      code = code || 1;
    }
  }
}
if (!interrupted) process.exit(code);
