import assert from "node:assert/strict";
import { test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store } from "@drover/server";

/*
 * Run variables as terraform sends them through the TFE API: HCL expressions, a map or an object
 * on several lines. They become one-line HCL values (each the only line of its tfvars file on
 * the agent), the same values; anything else a value could smuggle in is refused.
 */

test("terraform's multi-line maps and objects become the same value on one line", () => {
  assert.equal(store.oneLine('"bonjour"'), '"bonjour"');
  assert.equal(store.oneLine('{\n  "a" = "b"\n  "c" = "d"\n}'), '{ "a" = "b", "c" = "d" }');
  assert.equal(
    store.oneLine('{\n  a = {\n    x = 1\n  }\n  b = [1, 2]\n  c = [\n    {\n      y = "z"\n    },\n  ]\n}'),
    '{ a = { x = 1 }, b = [1, 2], c = [ { y = "z" }, ] }',
  );
  assert.equal(store.oneLine("{}"), "{}");
});

test("stored run variables: checked keys, one value each, no control characters", () => {
  assert.equal(store.storedRunVariables([]), null);
  assert.deepEqual(JSON.parse(store.storedRunVariables([{ key: "m", value: '{\n  a = "b"\n}' }]) ?? ""), [
    { key: "m", value: '{ a = "b" }' },
  ]);
  const refused = (vars: { key: string; value: string }[], message: RegExp) =>
    assert.throws(
      () => store.storedRunVariables(vars),
      (err: unknown) => err instanceof DroverError && err.code === "bad_request" && message.test(err.message),
    );
  // terraform's names may hold '-' (`variable "my-var"`), not start with it or a digit.
  assert.deepEqual(JSON.parse(store.storedRunVariables([{ key: "my-var", value: '"x"' }]) ?? ""), [
    { key: "my-var", value: '"x"' },
  ]);
  refused([{ key: "-x", value: "1" }], /not a valid name/);
  refused([{ key: "1x", value: "1" }], /not a valid name/);
  refused([{ key: "a b", value: "1" }], /not a valid name/);
  refused([{ key: "../x", value: "1" }], /not a valid name/);
  refused(
    [
      { key: "a", value: "1" },
      { key: "a", value: "2" },
    ],
    /given twice/,
  );
  refused([{ key: "a", value: "  \n " }], /no value/);
  refused([{ key: "a", value: '"x"\u0000' }], /control character/);
});
