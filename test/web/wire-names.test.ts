import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { csrfHeader, logHeaders } from "@drover/protocol";

// The UI takes only types from @drover/protocol (its zod schemas would weigh on the bundle), so
// it spells the header names itself; they must stay the server's.
const api = readFileSync(join(import.meta.dirname, "..", "..", "..", "packages", "web", "src", "api.ts"), "utf8");

test("the UI sends and reads the headers the server uses", () => {
  const constant = (name: string) => new RegExp(`export const ${name} = "([^"]+)";`).exec(api)?.[1];
  assert.equal(constant("csrfHeader"), csrfHeader);
  assert.equal(constant("logOffsetHeader"), logHeaders.nextOffset);
  assert.equal(constant("logCompleteHeader"), logHeaders.complete);
});
