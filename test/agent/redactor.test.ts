import assert from "node:assert/strict";
import { StreamRedactor } from "@drover/agent";
import { redactText, secretForms } from "@drover/protocol";
import { test } from "node:test";

// The agent's streaming redaction works on bytes: whatever way the output is cut into chunks,
// the result is the whole output redacted at once, and output without a secret is not copied.

function feed(redactor: StreamRedactor, chunks: Buffer[]): Buffer {
  const out: Buffer[] = [];
  for (const c of chunks) out.push(...redactor.push(c));
  out.push(redactor.end());
  return Buffer.concat(out);
}

function redactorFor(values: string[]): StreamRedactor {
  const r = new StreamRedactor();
  r.setSecrets(secretForms(values));
  return r;
}

const secrets = ["s3cr3t-pässwörd✓", "s3cr3t", "line one\nline two of a key"];
const text = `start s3cr3t-pässwörd✓ and s3cr3t, "s3cr3t-pässwörd✓" in JSON, line one\nline two of a key; ünïcödé ✓ end s3cr3t`;
const whole = Buffer.from(text, "utf8");
const expected = redactText(text, secretForms(secrets));

test("a secret split at any byte offset, inside a character too, is redacted as if the output came whole", () => {
  assert.ok(!expected.includes("s3cr3t"), expected);
  for (let at = 0; at <= whole.length; at++) {
    const got = feed(redactorFor(secrets), [whole.subarray(0, at), whole.subarray(at)]).toString("utf8");
    assert.equal(got, expected, `split at ${at}`);
  }
  for (let at = 0; at + 7 <= whole.length; at += 3) {
    const got = feed(redactorFor(secrets), [whole.subarray(0, at), whole.subarray(at, at + 7), whole.subarray(at + 7)]).toString("utf8");
    assert.equal(got, expected, `three pieces at ${at}`);
  }
  const byteByByte = [...whole].map((b) => Buffer.from([b]));
  assert.equal(feed(redactorFor(secrets), byteByByte).toString("utf8"), expected, "one byte at a time");
});

test("output without a secret passes uncopied and byte for byte, invalid UTF-8 included", () => {
  const r = redactorFor(["a-long-secret-value"]);
  const chunk = Buffer.concat([Buffer.from("terraform output without the value ".repeat(100)), Buffer.from([0xff, 0xfe, 0xc3])]);
  const first = r.push(chunk);
  assert.ok(first.length > 0);
  for (const piece of first) assert.equal(piece.buffer, chunk.buffer, "a view of the chunk, not a copy");
  const rest = feed(r, [chunk]);
  assert.deepEqual(Buffer.concat([...first, rest]), Buffer.concat([chunk, chunk]));
});

test("no secrets: every chunk passes as it is", () => {
  const r = new StreamRedactor();
  r.setSecrets([]);
  const chunk = Buffer.from("line\n");
  assert.deepEqual(r.push(chunk), [chunk]);
  assert.equal(r.end().length, 0);
});

test("output that cannot be the start of a secret passes at once; only a secret's beginning at the end is held", () => {
  const r = new StreamRedactor();
  r.setSecrets(["a-long-secret-value"]);
  const push = (s: string) => Buffer.concat(r.push(Buffer.from(s))).toString("utf8");
  // A finished line is sent now, not when terraform next prints (it may print nothing for long).
  assert.equal(push("holding\n"), "holding\n");
  assert.equal(push("tick a-lo"), "tick ", "the possible start of the secret waits");
  assert.equal(push("ng-secret-value done\n"), "*** done\n");
  assert.equal(push("a-lo"), "");
  assert.equal(push("t of output\n"), "a-lot of output\n", "held bytes that turn out not to be the secret follow at once");
  assert.equal(push("ends with a"), "ends with ");
  assert.equal(r.end().toString("utf8"), "a");
});

test("overlapping secrets, one inside another: any cut into three pieces gives the whole output's redaction", () => {
  const values = ["abcab", "bca", "cabx", "ab"];
  const input = "xabcabcabxabcabxbcabab-cab abca";
  const bytes = Buffer.from(input);
  const once = new StreamRedactor();
  once.setSecrets(values);
  // The leftmost secret wins, the longest where several start at one place.
  const want = feed(once, [bytes]).toString("utf8");
  assert.equal(want, "x*********x***b***-c*** ***ca");
  for (let i = 0; i <= bytes.length; i++) {
    for (let j = i; j <= bytes.length; j++) {
      const r = new StreamRedactor();
      r.setSecrets(values);
      assert.equal(feed(r, [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).toString("utf8"), want, `cut at ${i} and ${j}`);
    }
  }
});
