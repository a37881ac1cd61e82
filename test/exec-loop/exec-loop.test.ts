import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";

// The exec-loop protocol under every POSIX shell a runner image may have.

const script = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "..",
  "packages",
  "agent",
  "exec-loop",
  "exec-loop.sh",
);
const shells: Array<[string, string[]]> = [["dash", ["dash"]]];
if (spawnSync("busybox", ["sh", "-c", "true"]).status === 0) shells.push(["busybox sh", ["busybox", "sh"]]);
else
  test(
    "exec-loop under busybox sh",
    { skip: "busybox is not installed: install it (apt-get install busybox) to test the exec-loop under busybox sh" },
    () => {},
  );

/** Starts `n` CPU-bound processes so the loop runs on oversubscribed cores; returns their stop. */
function busyLoops(n: number): () => void {
  const loops = Array.from({ length: n }, () => spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
  return () => {
    for (const l of loops) l.kill("SIGKILL");
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every `pollMs` until it returns a truthy value; fails after `timeoutMs`. */
async function until<T>(what: string, check: () => T | undefined | false, timeoutMs = 10_000, pollMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(pollMs);
  }
}

class Loop {
  readonly dir = mkdtempSync(join(tmpdir(), "drover-exec-"));
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  private n = 0;
  constructor(shell: string[], env: Record<string, string> = {}) {
    this.child = spawn(shell[0]!, [...shell.slice(1), script], {
      env: { ...process.env, DROVER_EXEC_DIR: this.dir, DROVER_EXEC_TICK: "0.1", ...env },
      stdio: "ignore",
    });
    this.exited = new Promise((r) => this.child.on("exit", (code) => r(code)));
  }
  /** Writes a step the way the worker does: script first, then the ready marker by rename. */
  step(body: string): number {
    const n = ++this.n;
    const dir = join(this.dir, "steps", String(n));
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "script.sh"), body);
    writeFileSync(join(dir, "ready.tmp"), "");
    renameSync(join(dir, "ready.tmp"), join(dir, "ready"));
    return n;
  }
  signal(n: number, sig: string): void {
    const dir = join(this.dir, "steps", String(n));
    writeFileSync(join(dir, "signal.tmp"), sig);
    renameSync(join(dir, "signal.tmp"), join(dir, "signal"));
  }
  output(n: number): string {
    const p = join(this.dir, "steps", String(n), "output");
    return existsSync(p) ? readFileSync(p, "utf8") : "";
  }
  exitCode(n: number, timeoutMs?: number, pollMs?: number): Promise<number> {
    const p = join(this.dir, "steps", String(n), "exit");
    return until(
      `exit file of step ${n}`,
      () => existsSync(p) && Number(readFileSync(p, "utf8").trim()) + 1,
      timeoutMs,
      pollMs,
    ).then((v) => v - 1);
  }
  async close(): Promise<void> {
    writeFileSync(join(this.dir, "shutdown"), "");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5_000);
    await this.exited;
    clearTimeout(timer);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

for (const [name, shell] of shells) {
  describe(`exec-loop under ${name}`, () => {
    test("runs steps in order, captures output, records exit codes by rename", async () => {
      const loop = new Loop(shell);
      try {
        const a = loop.step("echo first; echo to-stderr >&2\n");
        assert.equal(await loop.exitCode(a), 0);
        const b = loop.step("echo second; exit 3\n");
        assert.equal(await loop.exitCode(b), 3);
        assert.equal(loop.output(a), "first\nto-stderr\n");
        assert.equal(loop.output(b), "second\n");
        assert.ok(
          !existsSync(join(loop.dir, "steps", "1", "exit.tmp")),
          "the exit file is renamed into place, never left half-written",
        );
      } finally {
        await loop.close();
      }
    });

    test("a second runner on the same directory refuses with exit 73 and runs no step (a Job pod started twice)", async () => {
      const loop = new Loop(shell, { HOSTNAME: "first-pod" });
      try {
        const n = loop.step('echo once >>"$0.count"; echo started; while :; do sleep 0.1; done\n');
        await until("the first runner's step", () => loop.output(n).includes("started"));
        assert.match(readFileSync(join(loop.dir, "runner.lock"), "utf8"), /^pod first-pod, pid \d+$/m);
        const second = spawn(shell[0]!, [...shell.slice(1), script], {
          env: { ...process.env, DROVER_EXEC_DIR: loop.dir, DROVER_EXEC_TICK: "0.1", HOSTNAME: "second-pod" },
          stdio: ["ignore", "ignore", "pipe"],
        });
        let stderr = "";
        second.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
        const code = await new Promise<number | null>((r) => second.on("close", (c) => r(c)));
        assert.equal(code, 73);
        assert.match(
          stderr,
          /is already driven by another runner \(pod first-pod, pid \d+\); refusing to run its steps a second time/,
        );
        loop.signal(n, "KILL");
        await loop.exitCode(n);
        assert.equal(
          readFileSync(join(loop.dir, "steps", String(n), "script.sh.count"), "utf8"),
          "once\n",
          "the step ran once",
        );
      } finally {
        await loop.close();
      }
    });

    test("forwards INT to the step (a graceful stop), then KILL", async () => {
      const loop = new Loop(shell);
      try {
        const n = loop.step("trap 'echo interrupted; exit 130' INT\necho started\nwhile :; do sleep 0.1; done\n");
        await until("step start", () => loop.output(n).includes("started"));
        loop.signal(n, "INT");
        assert.equal(await loop.exitCode(n), 130);
        assert.match(loop.output(n), /interrupted/);
        const k = loop.step("trap '' INT TERM\necho stubborn\nexec sleep 30\n");
        await until("stubborn start", () => loop.output(k).includes("stubborn"));
        loop.signal(k, "KILL");
        assert.equal(await loop.exitCode(k), 137);
      } finally {
        await loop.close();
      }
    });

    test("records the exit code of a step that ends at once, and 128+N for one ended by signal N", async () => {
      const loop = new Loop(shell);
      try {
        assert.equal(await loop.exitCode(loop.step("exit 0\n")), 0);
        assert.equal(await loop.exitCode(loop.step("")), 0, "an empty step");
        assert.equal(await loop.exitCode(loop.step("exit 7\n")), 7);
        assert.equal(await loop.exitCode(loop.step("kill -TERM $$\n")), 143);
        assert.equal(await loop.exitCode(loop.step("kill -KILL $$\n")), 137);
        assert.equal(await loop.exitCode(loop.step("echo after\n")), 0, "the loop serves on after a killed step");
      } finally {
        await loop.close();
      }
    });

    test("ignores the pod's SIGTERM: the step runs on and the loop keeps serving", async () => {
      const loop = new Loop(shell);
      try {
        const n = loop.step("echo working; sleep 1; echo done\n");
        await until("step start", () => loop.output(n).includes("working"));
        loop.child.kill("SIGTERM");
        assert.equal(await loop.exitCode(n), 0);
        assert.match(loop.output(n), /done/);
        const m = loop.step("echo still-here\n");
        assert.equal(await loop.exitCode(m), 0);
        assert.equal(loop.child.exitCode, null);
      } finally {
        await loop.close();
      }
    });

    test("touches its heartbeat every second, also while a step runs", async () => {
      const loop = new Loop(shell);
      try {
        const hb = join(loop.dir, "heartbeat");
        await until("first heartbeat", () => existsSync(hb));
        const n = loop.step("exec sleep 60\n");
        await until("step start", () => existsSync(join(loop.dir, "steps", String(n), "pid")));
        const first = statSync(hb).mtimeMs;
        await until("heartbeat advanced", () => statSync(hb).mtimeMs > first);
        assert.ok(
          !existsSync(join(loop.dir, "steps", String(n), "exit")),
          "the step was still running: its watcher kept the heartbeat",
        );
        loop.signal(n, "KILL");
        assert.equal(await loop.exitCode(n), 137);
      } finally {
        await loop.close();
      }
    });

    test("exits when the worker has gone silent, stopping a running step", async () => {
      const loop = new Loop(shell, { DROVER_EXEC_WORKER_TIMEOUT: "1" });
      const whb = join(loop.dir, "worker-heartbeat");
      writeFileSync(whb, "");
      const n = loop.step("echo long; exec sleep 60\n");
      // Fresh until the step runs: a slow start must not look like a silent worker.
      await until("step start", () => {
        utimesSync(whb, new Date(), new Date());
        return loop.output(n).includes("long");
      });
      const old = new Date(Date.now() - 30_000);
      utimesSync(whb, old, old);
      assert.equal(await loop.exitCode(n), 143, "the step was stopped with TERM");
      assert.match(loop.output(n), /worker stopped answering/);
      assert.equal(await loop.exited, 75);
      rmSync(loop.dir, { recursive: true, force: true });
    });

    test("exits 0 on shutdown", async () => {
      const loop = new Loop(shell);
      writeFileSync(join(loop.dir, "shutdown"), "");
      assert.equal(await loop.exited, 0);
      rmSync(loop.dir, { recursive: true, force: true });
    });
  });
}

// Every shell at once under one set of busy loops: the loops of the shells compete with the busy ones and with each
// other (more oversubscribed than one shell alone), and the busy loops burn their cores once, not once per shell.
test("200 instant steps in a row each record their exit code and output under every shell at once, with the cores oversubscribed", async () => {
  const stopBusy = busyLoops(3);
  try {
    const results = await Promise.allSettled(
      shells.map(async ([name, shell]) => {
        // A short tick and a close watch on the exit file: the race this hunts lives between fork and trap, not in
        // the waits around it, so those waits are cut to keep the 200 steps (and the busy cores) short.
        const loop = new Loop(shell, { DROVER_EXEC_TICK: "0.01" });
        try {
          for (let i = 0; i < 200; i++) {
            const n = loop.step("echo out; echo err >&2\n");
            assert.equal(await loop.exitCode(n, 30_000, 2), 0, `${name}: step ${n}`);
            assert.equal(loop.output(n), "out\nerr\n", `${name}: output of step ${n}`);
          }
        } finally {
          await loop.close();
        }
      }),
    );
    for (const r of results) if (r.status === "rejected") throw r.reason;
  } finally {
    stopBusy();
  }
});
