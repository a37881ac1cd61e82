import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { AgentClient } from "@drover/agent";
import { DroverError } from "@drover/protocol";
import { store } from "@drover/server";
import { until } from "../support/marked-processes.js";

// Every plan JSON a server stores is rendered (parsed, summarised, redacted) on a worker
// thread. Starting a thread per plan cost ~80 ms on every run's critical path: one thread now
// renders them one after another, and a document that breaks it does not break the next.

/** A plan JSON creating `n` resources whose input is `value`. */
function plan(n: number, value: string): Buffer {
  const changes = Array.from({ length: n }, (_, i) => ({
    address: `terraform_data.thing[${i}]`,
    change: { actions: ["create"], before: null, after: { input: value } },
  }));
  return Buffer.from(JSON.stringify({ format_version: "1.2", resource_changes: changes }));
}

/** About `mbytes` MB of small objects: several times that as a parsed heap. */
function heavy(mbytes: number): Buffer {
  const item = '{"address":"a","n":0},';
  return Buffer.from(`{"resource_changes":[],"padding":[${item.repeat((mbytes * 1024 * 1024) / item.length)}{}]}`);
}

/** Runs `use` with a thread of its own, closed afterwards whatever happens. */
async function withThread(
  heapMb: number,
  idleMs: number,
  use: (t: store.PlanJsonThread) => Promise<void>,
  deadlineMs?: (size: number) => number,
): Promise<void> {
  const thread = new store.PlanJsonThread(heapMb, idleMs, deadlineMs);
  try {
    await use(thread);
  } finally {
    await thread.close();
  }
}

test("plans rendered one after another share one thread, each summarised and redacted", async () => {
  await withThread(64, 60_000, async (thread) => {
    for (let n = 1; n <= 3; n++) {
      const body = plan(n, "hunter2-secret");
      const rendered = await thread.render(body, body.length, ["hunter2-secret"]);
      assert.equal(rendered.summary.add, n);
      assert.doesNotMatch(rendered.json.toString("utf8"), /hunter2-secret/);
    }
    assert.equal(thread.started, 1);
  });
});

test("documents sent at once are each answered with their own rendering", async () => {
  await withThread(64, 60_000, async (thread) => {
    const bodies = [5, 1, 3, 2, 4].map((n) => plan(n, `value-${n}`));
    const rendered = await Promise.all(bodies.map((b) => thread.render(b, b.length, [])));
    assert.deepEqual(
      rendered.map((r) => r.summary.add),
      [5, 1, 3, 2, 4],
    );
    assert.deepEqual(
      rendered.map((r) => JSON.parse(r.json.toString("utf8")).resource_changes[0].change.after.input),
      ["value-5", "value-1", "value-3", "value-2", "value-4"],
    );
    assert.equal(thread.started, 1);
  });
});

test("a document that is not JSON is refused and the thread goes on", async () => {
  await withThread(64, 60_000, async (thread) => {
    const bad = Buffer.from('{"resource_changes": [');
    await assert.rejects(thread.render(bad, bad.length, []), (err: unknown) => {
      assert.ok(err instanceof DroverError);
      assert.equal(err.code, "invalid_json");
      return true;
    });
    const good = plan(2, "x");
    assert.equal((await thread.render(good, good.length, [])).summary.add, 2);
    assert.equal(thread.started, 1);
  });
});

test("a document that is JSON but not an object is refused: terraform's own show of the plan needs one", async () => {
  await withThread(64, 60_000, async (thread) => {
    for (const text of ["[]", "null", '"plan"', "42"]) {
      const body = Buffer.from(text);
      await assert.rejects(thread.render(body, body.length, []), (err: unknown) => {
        assert.ok(err instanceof DroverError, text);
        assert.equal(err.code, "invalid_json", text);
        assert.match(err.message, /not a JSON object/, text);
        return true;
      });
    }
    assert.equal(thread.started, 1);
  });
});

test("a document whose resource or output changes are not objects is refused, naming the entry; the thread goes on", async () => {
  await withThread(64, 60_000, async (thread) => {
    const cases: [unknown, RegExp][] = [
      [{ resource_changes: [null] }, /resource_changes\[0\] is not an object/],
      [{ resource_changes: "all" }, /resource_changes is not a list/],
      [{ output_changes: { o: null } }, /output_changes\["o"\] is not an object/],
      [{ output_changes: [] }, /output_changes is not an object/],
    ];
    for (const [doc, message] of cases) {
      const body = Buffer.from(JSON.stringify(doc));
      await assert.rejects(thread.render(body, body.length, []), (err: unknown) => {
        assert.ok(err instanceof DroverError, JSON.stringify(doc));
        assert.equal(err.code, "invalid_json");
        assert.match(err.message, message);
        return true;
      });
    }
    const good = plan(2, "x");
    assert.equal((await thread.render(good, good.length, [])).summary.add, 2);
    assert.equal(thread.started, 1, "no thread died on the way");
  });
});

test("a document that outlasts its render deadline is refused as too large; its thread is replaced for the next", async () => {
  const slow = heavy(8);
  // The deadline runs from the hand-over: no thread parses 8 MB within 1 ms of it.
  await withThread(
    256,
    60_000,
    async (thread) => {
      await assert.rejects(thread.render(slow, slow.length, []), (err: unknown) => {
        assert.ok(err instanceof DroverError);
        assert.equal(err.code, "payload_too_large");
        assert.match(err.message, /took longer than 0.001 s to render; the run has no plan JSON/);
        return true;
      });
      const next = plan(3, "after");
      assert.equal((await thread.render(next, next.length, [])).summary.add, 3);
      assert.equal(thread.started, 2, "the overdue thread was ended, the next document got a new one");
    },
    (size) => (size === slow.length ? 1 : 60_000),
  );
});

test("the render deadline ends before the agent's deadline for the upload, so the agent hears why", () => {
  assert.ok(store.renderDeadlineMs < new AgentClient("http://127.0.0.1:1").timeouts.requestMs);
});

test("a document that exhausts the thread's heap is refused as too large; the one behind it is rendered", async () => {
  await withThread(32, 60_000, async (thread) => {
    const huge = heavy(24);
    const after = plan(2, "after");
    const [first, second] = await Promise.allSettled([
      thread.render(huge, huge.length, []),
      thread.render(after, after.length, []),
    ]);
    assert.equal(first.status, "rejected");
    assert.ok(first.reason instanceof DroverError, String(first.reason));
    assert.equal(first.reason.code, "payload_too_large");
    assert.match(first.reason.message, /needs more memory to parse than the server gives it \(32 MiB\)/);
    assert.equal(second.status, "fulfilled", String((second as PromiseRejectedResult).reason));
    assert.equal(second.value.summary.add, 2);
    assert.equal(thread.started, 2, "a new thread took over");
  });
});

test("a thread without work ends after its idle time, and the next document starts another", async () => {
  await withThread(64, 20, async (thread) => {
    const body = plan(1, "x");
    await thread.render(body, body.length, []);
    await until("the idle thread to end", () => !thread.running);
    assert.equal((await thread.render(body, body.length, [])).summary.add, 1);
    assert.equal(thread.started, 2);
  });
});

test("an idle thread does not keep the process alive", () => {
  const server = pathToFileURL(
    join(
      fileURLToPath(new URL(".", import.meta.url)),
      "..",
      "..",
      "..",
      "packages",
      "server",
      "dist",
      "src",
      "index.js",
    ),
  ).href;
  // The thread would be kept an hour: the program must still end once its document is rendered.
  const program = `
    const { store } = await import(${JSON.stringify(server)});
    const thread = new store.PlanJsonThread(64, 3_600_000);
    const body = Buffer.from('{"resource_changes":[{"address":"a.b","change":{"actions":["create"]}}]}');
    const rendered = await thread.render(body, body.length, []);
    console.log("add", rendered.summary.add, "running", thread.running);
  `;
  const dir = mkdtempSync(join(tmpdir(), "drover-plan-json-thread-"));
  const file = join(dir, "render-once.mjs");
  writeFileSync(file, program);
  const child = spawnSync(process.execPath, [file], { encoding: "utf8", timeout: 30_000 });
  rmSync(dir, { recursive: true, force: true });
  assert.equal(child.signal, null, "ended by itself, not by the timeout");
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout.trim(), "add 1 running true");
});
