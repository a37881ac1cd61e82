import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { getPriority, setPriority, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";

// scripts/run-tests.mjs itself: per-test timeouts, the throwaway PostgreSQL's cleanup, and the lints beside the tests.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const fixture = (name: string) => join(root, "test", "fixtures", "runner", name);

interface Finished {
  code: number | null;
  output: string;
}

/** This file runs under node --test, which marks its children with NODE_TEST_CONTEXT; a nested
 * runner that inherited it would report to us in the child protocol instead of running its files. */
function withoutTestContext(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  return env;
}

function runner(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [join(root, "scripts", "run-tests.mjs"), ...args], {
    cwd: root,
    env: { ...withoutTestContext(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const finished = new Promise<Finished>((resolve) => child.on("close", (code) => resolve({ code, output })));
  return { child, finished };
}

async function until<T>(what: string, check: () => T | undefined | false, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Each test runs its own runner, PostgreSQL and temp dirs: independent, so they run at once.
describe("run-tests.mjs", { concurrency: true }, () => {
  test("a hanging test fails under its own name once DROVER_TEST_TIMEOUT_MS has passed, and the run ends", async () => {
    const { finished } = runner([fixture("hangs.js")], { DROVER_TEST_TIMEOUT_MS: "1500" });
    const { code, output } = await finished;
    assert.equal(code, 1, output);
    assert.match(output, /✖ this test hangs \(\d+(\.\d+)?ms\)\n\s+'test timed out after 1500ms'/);
    assert.match(output, /✔ the file goes on after the hang/);
    assert.match(output, /still running 1500 ms after its last test \(open handles\); ending it/);
  });

  test("rejects a DROVER_TEST_TIMEOUT_MS that is not a positive number of milliseconds", async () => {
    const { code, output } = await runner([fixture("hangs.js")], { DROVER_TEST_TIMEOUT_MS: "5m" }).finished;
    assert.equal(code, 2);
    assert.match(output, /DROVER_TEST_TIMEOUT_MS must be a positive whole number of milliseconds; got "5m"/);
  });

  /** A directory for DROVER_TEST_LINT_DIR whose lint config refuses `debugger`, holding the files given. */
  function lintDir(files: Record<string, string>): string {
    const dir = mkdtempSync(join(tmpdir(), "drover-runner-lint-"));
    writeFileSync(join(dir, "eslint.promises.config.js"), 'export default [{ rules: { "no-debugger": "error" } }];\n');
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return dir;
  }

  test("--lint: passing tests, a lint finding and a misformatted file fail the run, each finding printed", async () => {
    const dir = lintDir({ "bad.mjs": "debugger;\nexport const x = {a:1};\n" });
    try {
      const { code, output } = await runner(["--lint", fixture("a-second.js")], { DROVER_TEST_LINT_DIR: dir }).finished;
      assert.equal(code, 1, output);
      assert.match(output, /✔ a-second runs second/);
      assert.match(output, /\[run-tests\] type-aware lint \(eslint\.promises\.config\.js\) failed:[\s\S]*no-debugger/);
      assert.match(output, /\[run-tests\] prettier --check failed:[\s\S]*bad\.mjs/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("--lint: clean lints and passing tests pass the run", async () => {
    const dir = lintDir({ "good.mjs": "export const x = { a: 1 };\n" });
    try {
      const { code, output } = await runner(["--lint", fixture("a-second.js")], { DROVER_TEST_LINT_DIR: dir }).finished;
      assert.equal(code, 0, output);
      assert.match(output, /\[run-tests\] type-aware lint \(eslint\.promises\.config\.js\): passed/);
      assert.match(output, /\[run-tests\] prettier --check: passed/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  /** Whether this process may raise another's priority (root, or a generous RLIMIT_NICE). */
  async function mayRaisePriority(): Promise<boolean> {
    const niced = spawn("nice", ["-n", "10", "sleep", "30"], { stdio: "ignore" });
    try {
      // No `nice` on the machine ends it too (an "error" instead of a "spawn"): then no pid, so false.
      await new Promise((resolve) => {
        niced.once("spawn", resolve);
        niced.once("error", resolve);
      });
      if (niced.pid === undefined) return false;
      setPriority(niced.pid, getPriority());
      return true;
    } catch {
      return false;
    } finally {
      niced.kill("SIGKILL");
    }
  }

  test("--lint: a lint still running when the tests end gets the runner's priority back", async (t) => {
    if (!(await mayRaisePriority())) {
      t.skip("raising a process's priority needs privilege this process does not have");
      return;
    }
    // The lint's config stands for a long lint: it ends only once its priority is the runner's
    // (the tests have ended by then) and records what it saw; a lint left at nice 10 waits 60 s.
    const dir = lintDir({
      "good.mjs": "export const x = { a: 1 };\n",
      ".prettierignore": "eslint.promises.config.js\n",
    });
    const seen = join(dir, "priority.txt");
    writeFileSync(
      join(dir, "eslint.promises.config.js"),
      `import { writeFileSync } from "node:fs";
import { getPriority } from "node:os";
const deadline = Date.now() + 60_000;
while (getPriority() !== ${getPriority()} && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
writeFileSync(${JSON.stringify(seen)}, String(getPriority()));
export default [];
`,
    );
    try {
      const { code, output } = await runner(["--lint", fixture("a-second.js")], { DROVER_TEST_LINT_DIR: dir }).finished;
      assert.equal(code, 0, output);
      assert.match(output, /\[run-tests\] type-aware lint \(eslint\.promises\.config\.js\): passed/);
      assert.equal(
        readFileSync(seen, "utf8"),
        String(getPriority()),
        "the lint ran at the runner's priority in the end",
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const [signal, expected] of [
    ["SIGTERM", 143],
    ["SIGINT", 130],
  ] as const) {
    test(`${signal} stops the running tests and the throwaway PostgreSQL`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "drover-runner-"));
      try {
        const out = join(dir, "fixture.json");
        const { child, finished } = runner([fixture("waits.js")], { RUNNER_FIXTURE_OUT: out });
        const seen = await until("the fixture test to start", () => existsSync(out) && readFileSync(out, "utf8"));
        const { url, pid } = JSON.parse(seen) as { url: string; pid: number };
        const port = Number(new URL(url).port);
        assert.ok(await accepts(port), "the test PostgreSQL is up while the tests run");
        child.kill(signal);
        const { code, output } = await finished;
        assert.equal(code, expected, output);
        assert.match(output, new RegExp(`\\[run-tests\\] ${signal}: stopping the tests and the test PostgreSQL`));
        assert.equal(await accepts(port), false, "the test PostgreSQL was stopped");
        await until("the fixture's test process to end", () => !alive(pid), 15_000);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
