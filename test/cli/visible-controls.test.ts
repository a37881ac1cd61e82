import assert from "node:assert/strict";
import { test } from "node:test";
import { VisibleControls } from "@drover/cli/visible";

// N9: the CLI's log printer makes control characters visible however the log is cut into pages.

function shown(chunks: Buffer[]): string {
  const v = new VisibleControls();
  return Buffer.concat([...chunks.map((c) => v.push(c)), v.end()]).toString("utf8");
}

test("N9: escapes, C1 controls, bidi overrides and lone CRs become visible at any cut; newlines, tabs and CR LF stay", () => {
  const text = "a\u001b]52;c;x\u0007 b\u009b2J c\u202eevil\u202c d\r fake\r\nline\tend ü✓\n";
  const want = "a\\u{1b}]52;c;x\\u{7} b\\u{9b}2J c\\u{202e}evil\\u{202c} d\\u{d} fake\r\nline\tend ü✓\n";
  const bytes = Buffer.from(text, "utf8");
  assert.equal(shown([bytes]), want);
  for (let i = 0; i <= bytes.length; i++) {
    for (let j = i; j <= bytes.length; j++) {
      assert.equal(
        shown([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]),
        want,
        `cut at ${i} and ${j}`,
      );
    }
  }
});

test("output without control characters passes as it is, uncopied", () => {
  const chunk = Buffer.from("plain terraform output\n\twith a tab\r\n");
  const v = new VisibleControls();
  assert.equal(v.push(chunk), chunk);
  assert.equal(v.end().length, 0);
});
