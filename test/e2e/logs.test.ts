import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { numberedLinesCommand, printedLines } from "../support/provisioner-lines.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import { routes } from "@drover/protocol";

// `drover run logs`: real CLI, real server, real agent, real terraform.

let stack: Stack;

before(async () => {
  stack = await startStack();
  await stack.startAgent("logger");
});
after(() => stack?.stop());

async function workspace(name: string): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

const lines = 200_000;
let bigRun = "";

test("run logs prints every line of a 15 MB apply log once, in order", async () => {
  await workspace("big");
  // ~75 bytes a line once terraform prefixes it: about 15 MB in all.
  const dir = writeConfig(stack.dir, "big", {
    "main.tf": `resource "terraform_data" "big" {\n  provisioner "local-exec" {\n    command = "${numberedLinesCommand(lines)}"\n  }\n}\n`,
  });
  bigRun = await stack.startRun(dir, "big", ["--auto-apply"]);
  await stack.waitForRun(bigRun, ["applied"], 600_000);
  const res = await stack.cli(["run", "logs", bigRun, "--phase", "apply"], { timeoutMs: 300_000 });
  assert.equal(res.code, 0, res.stderr);
  assert.equal(res.stderr, "");
  assert.ok(res.stdout.length > 14_000_000, `the apply log is ${res.stdout.length} bytes`);
  const seen = printedLines(res.stdout);
  assert.equal(seen.length, lines, "every line printed once");
  assert.ok(
    seen.every((n, i) => n === i + 1),
    "in order",
  );
  assert.match(res.stdout, /Apply complete!/);
  assert.doesNotMatch(res.stdout, /Terraform will perform the following actions/, "--phase apply leaves the plan out");
});

test("run logs without --phase prints the plan log, then the apply log", async () => {
  const res = await stack.cli(["run", "logs", bigRun], { timeoutMs: 300_000 });
  assert.equal(res.code, 0, res.stderr);
  const plan = res.stdout.indexOf("Terraform will perform the following actions");
  const apply = res.stdout.indexOf("Apply complete!");
  assert.ok(plan >= 0 && apply > plan, "plan first, then apply");
  assert.equal(printedLines(res.stdout).length, lines);
  const planOnly = await stack.cli(["run", "logs", bigRun, "--phase", "plan"]);
  assert.equal(planOnly.code, 0, planOnly.stderr);
  assert.equal(
    res.stdout,
    planOnly.stdout + res.stdout.slice(planOnly.stdout.length),
    "the plan log comes first, whole",
  );
  assert.equal(printedLines(planOnly.stdout).length, 0);
});

test("a line terraform prints in pieces counts once, wherever the provisioner paused in it", async () => {
  // The provisioner stops mid-line long enough for terraform to flush the partial line (its
  // line reader waits about 100 ms), at the offsets that once lost a line: inside "line", after
  // a space terraform then trims, and just before the newline.
  await workspace("pieces");
  const splits = [1, 2, 3, 4, 5, 6, 11, 12, 13, 38];
  const script = splits
    .map((at, i) => {
      const text = `line ${String(i + 1).padStart(6, "0")} ${"x".repeat(26)}`;
      return `printf '%s' '${text.slice(0, at)}'; sleep 0.3; printf '%s\\\\n' '${text.slice(at)}'`;
    })
    .join("; ");
  const dir = writeConfig(stack.dir, "pieces", {
    "main.tf": `resource "terraform_data" "pieces" {\n  provisioner "local-exec" {\n    command = "${script}"\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, "pieces", ["--auto-apply"]);
  await stack.waitForRun(runId, ["applied"]);
  const res = await stack.cli(["run", "logs", runId, "--phase", "apply"]);
  assert.equal(res.code, 0, res.stderr);
  assert.deepEqual(
    printedLines(res.stdout),
    splits.map((_, i) => i + 1),
    res.stdout,
  );
});

test("run logs --json prints one JSON document of the phases' logs, with --follow once the run has settled", async () => {
  await workspace("json-logs");
  const dir = writeConfig(stack.dir, "json-logs", {
    "main.tf": `resource "terraform_data" "said" {\n  provisioner "local-exec" {\n    command = "echo said-in-apply"\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, "json-logs", ["--auto-apply"]);
  // Followed first: it waits for the run to settle, after which the plain read has every byte too.
  for (const flags of [["--follow"], []]) {
    const res = await stack.cli(["run", "logs", runId, "--json", ...flags]);
    assert.equal(res.code, 0, res.stderr);
    const doc = JSON.parse(res.stdout) as { runId: string; logs: { phase: string; complete: boolean; text: string }[] };
    assert.equal(doc.runId, runId);
    assert.deepEqual(
      doc.logs.map((l) => [l.phase, l.complete]),
      [
        ["plan", true],
        ["apply", true],
      ],
      flags.join(" "),
    );
    assert.match(doc.logs[0]!.text, /Terraform will perform the following actions/);
    assert.match(doc.logs[1]!.text, /said-in-apply/);
  }
  // A run waiting for its confirmation: its apply may still come, so that log is not complete.
  const changed = writeConfig(stack.dir, "json-logs-changed", {
    "main.tf": `resource "terraform_data" "said" {\n  input = "changed"\n}\n`,
  });
  const waiting = await stack.startRun(changed, "json-logs");
  await stack.waitForRun(waiting, ["planned"]);
  const followed = await stack.cli(["run", "logs", waiting, "--json", "--follow"]);
  assert.deepEqual(
    (JSON.parse(followed.stdout) as { logs: { phase: string; complete: boolean }[] }).logs.map((l) => [
      l.phase,
      l.complete,
    ]),
    [
      ["plan", true],
      ["apply", false],
    ],
  );
  const applyOnly = await stack.cli(["run", "logs", runId, "--json", "--phase", "apply"]);
  assert.deepEqual(
    (JSON.parse(applyOnly.stdout) as { logs: { phase: string }[] }).logs.map((l) => l.phase),
    ["apply"],
  );
});

test("run logs rejects an unknown --phase", async () => {
  const res = await stack.cli(["run", "logs", bigRun, "--phase", "destroy"]);
  assert.equal(res.code, 2);
  assert.match(res.stderr, /Allowed choices are plan, apply/);
});

test("run logs exits non-zero with log_incomplete when a page cannot be read", async () => {
  // A proxy that passes the first page of the log and fails every later one.
  const proxy: Server = createServer((req, res) => {
    if (req.url?.includes("/logs?") && !req.url.includes("offset=0&")) {
      res
        .writeHead(500, { "content-type": "application/json" })
        .end(JSON.stringify({ error: "internal", message: "injected failure" }));
      return;
    }
    const upstream = request(
      new URL(req.url ?? "/", stack.server.url),
      { method: req.method, headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  try {
    const address = proxy.address();
    assert.ok(address && typeof address === "object");
    const res = await stack.cli(["run", "logs", bigRun, "--phase", "apply"], {
      env: { DROVER_URL: `http://127.0.0.1:${address.port}` },
    });
    assert.equal(res.code, 1);
    assert.match(
      res.stderr,
      /printed 1048576 bytes of the apply log of run run-\S+, then the read failed: injected failure\. Run `drover run logs run-\S+ --phase apply` again\. \(log_incomplete\)/,
    );
    assert.equal(Buffer.byteLength(res.stdout), 1024 * 1024, "what was read is printed, nothing more");
  } finally {
    await new Promise((resolve) => proxy.close(resolve));
  }
});

test("run logs of an unknown run fails with not_found", async () => {
  const res = await stack.cli(["run", "logs", "run-doesnotexist"]);
  assert.equal(res.code, 1);
  assert.match(res.stderr, /\(not_found\)\n$/);
  assert.equal(res.stdout, "");
});

test("run logs of a phase still running prints what exists and says the log is not finished", async () => {
  await workspace("held");
  const release = join(stack.dir, "release-held");
  const dir = writeConfig(stack.dir, "held", {
    "main.tf": `resource "terraform_data" "held" {\n  provisioner "local-exec" {\n    command = "echo holding; while [ ! -e '${release}' ]; do sleep 0.1; done"\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, "held", ["--auto-apply"]);
  try {
    for (;;) {
      const res = await stack.cli(["run", "logs", runId, "--phase", "apply"]);
      assert.equal(res.code, 0, res.stderr);
      if (!res.stdout.includes("(local-exec): holding")) continue;
      assert.match(
        res.stderr,
        new RegExp(
          `the apply log of run ${runId} is not finished yet \\(\\d+ bytes so far\\); use --follow to keep reading`,
        ),
      );
      break;
    }
  } finally {
    if (!existsSync(release)) writeFileSync(release, "");
  }
  await stack.waitForRun(runId, ["applied"]);
});
