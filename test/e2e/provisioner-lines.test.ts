import assert from "node:assert/strict";
import { test } from "node:test";
import { printedLines } from "../support/provisioner-lines.js";

// The reader of a provisioner's numbered lines (test/e2e/logs and the log-heavy bench's check):
// a line terraform printed in two pieces must count once wherever it was split. Twice under a
// doubly loaded CI run, `run logs` of a whole 200,000-line log counted 199,999: the old reader
// skipped a first piece shorter than "line" ("lin" + "e 000123 …") and could not join pieces
// whose space terraform had trimmed ("line" + "000123 …").

const prefix = "terraform_data.big (local-exec): ";
const line = (n: number) => `line ${String(n).padStart(6, "0")} ${"x".repeat(26)}`;

/** What terraform 1.x prints for one piece its line reader flushed. */
function terraformPrints(piece: string): string {
  const trimmed = piece.replace(/\s+$/, "");
  return trimmed === "" ? "" : `${prefix}${trimmed}\n`;
}

test("a line split at any offset, the newline's included, counts once", () => {
  const whole = `${line(1)}\n`;
  for (let at = 0; at <= whole.length; at++) {
    const out = [
      "terraform_data.big: Provisioning with 'local-exec'...\n",
      `${prefix}Executing: ["/bin/sh" "-c" "seq"]\n`,
    ];
    out.push(terraformPrints(whole.slice(0, at)), terraformPrints(whole.slice(at)), terraformPrints(line(2)));
    assert.deepEqual(printedLines(out.join("")), [1, 2], `split at ${at}: ${JSON.stringify(out)}`);
  }
});

test("terraform 1.11's own output of lines the provisioner paused in", () => {
  // Printed by terraform 1.11.4 for `printf 'line '; sleep 0.5; printf '000001 …\n'; …`.
  const out = [
    "terraform_data.big: Provisioning with 'local-exec'...",
    `${prefix}Executing: ["/bin/sh" "-c" "printf 'line '; sleep 0.5; printf '000001 xxx'"]`,
    `${prefix}line`,
    `${prefix}000001 xxxxxxxxxxxxxxxxxxxxxxxxxx`,
    `${prefix}lin`,
    `${prefix}e 000002 xxxxxxxxxxxxxxxxxxxxxxxxxx`,
    `${prefix}line 000003`,
    `${prefix}xxxxxxxxxxxxxxxxxxxxxxxxxx`,
    `${prefix}line 000004 xxxxxxxxxxxxxxxxxxxxxxxxxx`,
    `${prefix}line 000005 xxxxxxxxxxxxxxxxxxxxxxxxxx`,
    "terraform_data.big: Creation complete after 2s [id=0c5e]",
  ].join("\n");
  assert.deepEqual(printedLines(out), [1, 2, 3, 4, 5]);
});

test("a lost, doubled or damaged line is seen", () => {
  const print = (ns: number[]) => ns.map((n) => `${prefix}${line(n)}\n`).join("");
  assert.deepEqual(printedLines(print([1, 3])), [1, 3]);
  assert.deepEqual(printedLines(print([1, 2, 2])), [1, 2, 2]);
  assert.deepEqual(printedLines(`${print([1])}${prefix}line 000002 xxxx\n${print([3])}`), [1, -1, 3]);
  assert.deepEqual(printedLines(`${print([1])}${prefix}${line(2).slice(0, 20)}`), [1, -1], "a last line cut short");
});
