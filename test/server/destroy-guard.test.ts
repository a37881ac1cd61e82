import assert from "node:assert/strict";
import { test } from "node:test";
import { store } from "@drover/server";

/* Which finished plans the destroy-all guard holds instead of applying them on their own. */

const plan = {
  auto_apply: 1,
  is_destroy: 0,
  allow_destroy_all: 0,
  destroys_all: 0 as number | null,
  plan_add: 0 as number | null,
  plan_destroy: 2 as number | null,
};

test("a plan the plan JSON shows destroying everything is held; one leaving resources is not", () => {
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: 1 }), true);
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: 0 }), false);
});

test("without its plan JSON, a plan that only destroys is held: the guard fails closed", () => {
  // The JSON was over DROVER_MAX_PLAN_JSON_MB: only terraform's summary line is known.
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: null }), true);
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: null, plan_add: 1 }), false, "it adds: not all gone");
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: null, plan_destroy: 0 }), false);
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: null, plan_destroy: null }), false);
});

test("a -destroy run, an allowed one and one that waits for confirmation anyway are not held", () => {
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: 1, is_destroy: 1 }), false);
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: 1, allow_destroy_all: 1 }), false);
  assert.equal(store.heldByDestroyGuard({ ...plan, destroys_all: 1, auto_apply: 0 }), false);
});
