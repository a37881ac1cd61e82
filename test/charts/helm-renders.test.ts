// test/support/helm.ts: a render is reused only while the chart, the arguments and every values
// file they name are the same.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { helmTemplate, keptRender } from "../support/helm.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

// Other test files render into the same directory meanwhile: only this test's own renders are
// looked at. A render written again is a new file (written aside, then renamed over the old one).
test("a values file's contents are part of the render's key; the same render is kept once", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-helm-renders-"));
  try {
    const values = join(dir, "values.yaml");
    const args = ["template", "rel", join(repo, "charts", "agent-local"), "-f", values];
    const token = (n: number) => `drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.${dir.slice(-6)}${n}`;
    writeFileSync(values, `agent:\n  token: ${token(1)}\n`);
    const first = helmTemplate(args);
    const firstFile = keptRender(args);
    const written = statSync(firstFile).ino;
    assert.equal(helmTemplate(args), first, "the same arguments and file: the kept render");
    assert.equal(statSync(firstFile).ino, written, "kept once, not rendered again");
    writeFileSync(values, `agent:\n  token: ${token(2)}\n`);
    const second = helmTemplate(args);
    assert.notEqual(second, first, "an edited values file is rendered afresh");
    assert.notEqual(keptRender(args), firstFile, "under a key of its own");
    assert.ok(statSync(keptRender(args)).isFile());
    assert.equal(helmTemplate(args, { fresh: true }), second, "a fresh render of the same input renders the same");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
