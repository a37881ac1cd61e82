import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reportedVersion } from "@drover/agent";

/** A `terraform` that notes each time it is asked, then prints `body`. */
function writeEngine(dir: string, body: string): string {
  const path = join(dir, "terraform");
  const next = join(dir, "terraform.next");
  writeFileSync(next, `#!/bin/sh\necho asked >> ${join(dir, "asked")}\n${body}\n`, { mode: 0o755 });
  // A new file, as a package upgrade installs one.
  renameSync(next, path);
  return path;
}

const asked = (dir: string) => readFileSync(join(dir, "asked"), "utf8").split("\n").filter(Boolean).length;

test("an engine is asked its version once, and again after it is replaced in place", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "drover-engine-version-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = writeEngine(dir, `echo '{"terraform_version":"1.5.0"}'`);
  assert.equal(await reportedVersion(path), "1.5.0");
  assert.equal(await reportedVersion(path), "1.5.0");
  assert.equal(asked(dir), 1, "the second job does not start the binary again");

  writeEngine(dir, `echo '{"terraform_version":"1.6.1"}'`);
  assert.equal(await reportedVersion(path), "1.6.1");
  assert.equal(asked(dir), 2);
});

test("an engine that does not answer is 'unknown' after the deadline, and asked again by the next job", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "drover-engine-version-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // It ignores SIGTERM, as a wedged binary may (for two minutes at most, should the kill fail).
  const path = writeEngine(dir, "trap '' TERM; i=0; while [ $i -lt 120 ]; do sleep 1; i=$((i+1)); done");
  assert.equal(await reportedVersion(path, 300), "unknown");
  assert.equal(await reportedVersion(path, 300), "unknown");
  assert.equal(asked(dir), 2);
});

test("an engine printing its version as text (an old release) is read from the text", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "drover-engine-version-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = writeEngine(dir, `echo 'Terraform v0.12.31'`);
  assert.equal(await reportedVersion(path), "0.12.31");
});
