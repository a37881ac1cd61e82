import assert from "node:assert/strict";
import { StreamRedactor } from "@drover/agent";
import { containsSecret, redactJson, redactText, secretForms } from "@drover/runtime";
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
    const got = feed(redactorFor(secrets), [
      whole.subarray(0, at),
      whole.subarray(at, at + 7),
      whole.subarray(at + 7),
    ]).toString("utf8");
    assert.equal(got, expected, `three pieces at ${at}`);
  }
  const byteByByte = [...whole].map((b) => Buffer.from([b]));
  assert.equal(feed(redactorFor(secrets), byteByByte).toString("utf8"), expected, "one byte at a time");
});

test("output without a secret passes uncopied and byte for byte, invalid UTF-8 included", () => {
  const r = redactorFor(["a-long-secret-value"]);
  const chunk = Buffer.concat([
    Buffer.from("terraform output without the value ".repeat(100)),
    Buffer.from([0xff, 0xfe, 0xc3]),
  ]);
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
  assert.equal(
    push("t of output\n"),
    "a-lot of output\n",
    "held bytes that turn out not to be the secret follow at once",
  );
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
      assert.equal(
        feed(r, [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).toString("utf8"),
        want,
        `cut at ${i} and ${j}`,
      );
    }
  }
});

/** Greedy word wrap at spaces, as terraform's diagnostics do (go-wordwrap), each line behind `prefix`. */
function wrap(text: string, width: number, prefix: string): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  lines.push(line);
  return lines.map((l) => prefix + l).join("\n");
}

const wrapped = "correct horse battery staple zebra";
const secretWords = /correct|horse|battery|staple|zebra/;
const diagnostic = (width: number, prefix: string) =>
  wrap(
    `Error running command 'echo': exit status 1. Output: psql: connection to db.internal.example.com failed, password ${wrapped} rejected`,
    width,
    prefix,
  );

test("N1: a multi-word secret terraform wrapped (any width, box prefix, colour) is redacted in text and in every chunking", () => {
  const prefixes = ["", "│ ", "\u001b[31m│\u001b[0m \u001b[0m", "      "];
  for (const width of [20, 40, 60, 76, 78, 80, 100, 120]) {
    for (const prefix of prefixes) {
      const text = `${diagnostic(width, prefix)}\nnext line\n`;
      assert.ok(text.includes(wrapped) || /battery|staple/.test(text));
      const once = redactText(text, secretForms([wrapped]));
      assert.doesNotMatch(once, secretWords, `width ${width} prefix ${JSON.stringify(prefix)}: ${once}`);
      assert.ok(once.includes("password") && once.includes("***") && once.includes("rejected"), once);
      const bytes = Buffer.from(text, "utf8");
      for (let at = 0; at <= bytes.length; at += width === 78 ? 1 : 7) {
        const got = feed(redactorFor([wrapped]), [bytes.subarray(0, at), bytes.subarray(at)]).toString("utf8");
        assert.equal(got, once, `width ${width}, prefix ${JSON.stringify(prefix)}, split at ${at}`);
      }
    }
  }
  const byteByByte = [...Buffer.from(diagnostic(78, "│ "), "utf8")].map((b) => Buffer.from([b]));
  assert.doesNotMatch(feed(redactorFor([wrapped]), byteByByte).toString("utf8"), secretWords);
});

test("N1: a line ending with a wrapped secret's first words waits for the next line; one that cannot continue it does not", () => {
  const r = redactorFor([wrapped]);
  const push = (s: string) => Buffer.concat(r.push(Buffer.from(s))).toString("utf8");
  assert.equal(push("password correct horse battery\n"), "password ");
  assert.equal(push("│ staple zebra rejected\n"), "*** rejected\n");
  assert.equal(push("correct horse\n"), "");
  assert.equal(push("│ nothing more\n"), "correct horse\n│ nothing more\n");
});

test("N7, N11: Go's HTML-safe JSON, doubly escaped JSON and JSON object keys are redacted", () => {
  const amp = "Tr0ub4dor&3<x>";
  const quoted = 'he said "q\\u0075ote\\" back\\slash';
  const forms = secretForms([amp, quoted]);
  // What terraform's apply log shows for nonsensitive(jsonencode({password = var.amp})).
  const goJson = 'j = "{\\"password\\":\\"Tr0ub4dor\\\\u00263\\\\u003cx\\\\u003e\\"}"';
  assert.equal(redactText(goJson, forms), 'j = "{\\"password\\":\\"***\\"}"');
  const jsonenc = JSON.stringify(JSON.stringify({ k: quoted }));
  assert.equal(redactText(`jsonenc = ${jsonenc}`, forms), 'jsonenc = "{\\"k\\":\\"***\\"}"');
  const outputValue = JSON.parse(goJson.slice(4)) as string;
  assert.ok(containsSecret(outputValue, forms), "the outputs mask sees the Go-escaped form");
  const plan = { after: { input: { [amp]: "v", plain: amp } } };
  assert.deepEqual(redactJson(plan, forms), { after: { input: { "***": "v", plain: "***" } } });
  assert.ok(containsSecret({ [amp]: 1 }, forms));
});
