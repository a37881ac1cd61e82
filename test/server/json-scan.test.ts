import assert from "node:assert/strict";
import { test } from "node:test";
import { store } from "@drover/server";

// The streamed state check must accept exactly what JSON.parse accepts and read the same
// top-level serial and lineage, however the body is cut into pieces.

const keep = ["serial", "lineage"];

function scan(
  text: string | Buffer,
  cuts: number[] = [],
): { ok: true; top: string; fields: Map<string, unknown> } | { ok: false; kind: string } {
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text, "utf8");
  const scanner = new store.JsonScanner({ keep, maxKeptBytes: 64 });
  try {
    let at = 0;
    for (const cut of [...cuts, bytes.length]) {
      scanner.push(bytes.subarray(at, cut));
      at = cut;
    }
    scanner.end();
  } catch (err) {
    assert.ok(err instanceof store.JsonScanError, String(err));
    return { ok: false, kind: err.kind };
  }
  const r = scanner.result();
  return { ok: true, top: r.topLevel, fields: r.fields };
}

const valid = [
  "{}",
  " { } ",
  "[]",
  '"x"',
  "0",
  "-0.5e+10",
  "true",
  "null",
  '{"serial":3,"lineage":"a-b"}',
  '{"serial":1,"serial":2}',
  '{"serial":2,"serial":"x"}',
  '{"serial":{"serial":9},"lineage":["x"]}',
  '{"a":{"serial":5},"serial":1.0e0,"lineage":"\\u00e9\\"\\n"}',
  '{"se\\u0072ial":4}',
  '{"lineage":null,"serial":true}',
  '[{"serial":1}]',
  '{"x":[1,2,[3,{"y":"z"}]],"serial":12345678901234567890}',
  '{"é":"ü","lineage":"ä"}',
];
const invalid = [
  "",
  " ",
  "{",
  "}",
  "{,}",
  '{"a"}',
  '{"a":}',
  '{"a":1,}',
  "[1,]",
  "01",
  "-",
  "1.",
  "1e",
  "+1",
  ".5",
  "tru",
  "nul",
  "[1 2]",
  '{"a":1 "b":2}',
  '"\\x"',
  '"\\u12g4"',
  '"a\nb"',
  "\uFEFF{}",
  "{} x",
  "{}{}",
  "'a'",
  "NaN",
  '{"a":1}}',
];

test("accepts and rejects what JSON.parse does, and keeps the same top-level members, at every cut", () => {
  for (const text of [...valid, ...invalid]) {
    let expected: unknown;
    let parses = true;
    try {
      expected = JSON.parse(text);
    } catch {
      parses = false;
    }
    const length = Buffer.byteLength(text);
    for (let cut = 0; cut <= length; cut++) {
      const got = scan(text, [cut]);
      assert.equal(got.ok, parses, `${JSON.stringify(text)} cut at ${cut}`);
      if (!got.ok || !parses) continue;
      const kind = Array.isArray(expected)
        ? "array"
        : expected === null || typeof expected === "boolean"
          ? "literal"
          : typeof expected;
      assert.equal(got.top, kind, JSON.stringify(text));
      if (kind !== "object") continue;
      const object = expected as Record<string, unknown>;
      for (const name of keep) {
        const want = object[name];
        const have: unknown = got.fields.get(name);
        if (typeof want === "object" && want !== null) assert.equal(have, store.nonScalar, `${name} of ${text}`);
        else assert.deepEqual(have, want, `${name} of ${text}`);
      }
    }
  }
});

test("cut into single bytes, a document of nested structures checks the same", () => {
  const doc = JSON.stringify({
    version: 4,
    serial: 42,
    lineage: "l-1",
    resources: Array.from({ length: 50 }, (_, i) => ({ i, s: `v${i}\u2603`, n: [i, -i / 3, null, true] })),
  });
  const bytes = Buffer.from(doc);
  const got = scan(
    bytes,
    Array.from({ length: bytes.length - 1 }, (_, i) => i + 1),
  );
  assert.ok(got.ok);
  assert.equal(got.fields.get("serial"), 42);
  assert.equal(got.fields.get("lineage"), "l-1");
});

test("a kept member over its size limit is refused as too long, not as a syntax error", () => {
  const got = scan(JSON.stringify({ lineage: "x".repeat(100) }));
  assert.deepEqual(got, { ok: false, kind: "too_long" });
  assert.ok(
    scan(JSON.stringify({ other: "x".repeat(100), lineage: "short" })).ok,
    "members that are not kept have no limit",
  );
});
