import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { capability, type StoreContext } from "@drover/server";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * Capability URLs (tfe/capability.ts): the URL is the credential, so every other use than the one
 * it was signed for is refused — another method, another object, after its expiry, a second
 * upload, a forged or altered signature, and a key that is not the server's stored one.
 */

const refused = (why: RegExp) => (err: unknown) =>
  err instanceof DroverError && err.code === "forbidden" && why.test(err.message);

for (const backend of backends) {
  describe(`capability URLs: ${backend}`, () => {
    let clock = 1_700_000_000_000;
    let ctx: StoreContext;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, c) => (ctx = c),
    );
    const upload = (id: string, nonce: string | undefined = capability.newNonce()) => ({
      method: "PUT" as const,
      kind: "configuration-versions",
      id,
      expiresAt: clock + 60_000,
      nonce,
    });
    const request = (id: string, method = "PUT") => ({ method, kind: "configuration-versions", id, now: clock });

    test("the key is made once, stored, and the same for every server of the database", async () => {
      const key = await capability.capabilityKey(ctx);
      assert.equal(key.length, 32);
      const other = { ...ctx };
      assert.deepEqual(await capability.capabilityKey(other), key);
      const row = await ctx.db.selectFrom("server_keys").select("key").executeTakeFirstOrThrow();
      assert.deepEqual(Buffer.from(row.key), key);
    });

    test("the URL does what it was signed for, once", async () => {
      const key = await capability.capabilityKey(ctx);
      const segment = capability.signCapability(key, upload("cv-one"));
      const c = capability.verifyCapability(key, segment, request("cv-one"));
      await capability.spendCapability(ctx, c);
      // Replayed after use.
      const again = capability.verifyCapability(key, segment, request("cv-one"));
      await assert.rejects(capability.spendCapability(ctx, again), refused(/already used/));
    });

    test("another method, another object or another kind is refused", async () => {
      const key = await capability.capabilityKey(ctx);
      const segment = capability.signCapability(key, upload("cv-two"));
      assert.throws(
        () => capability.verifyCapability(key, segment, request("cv-two", "GET")),
        refused(/allows PUT, not GET/),
      );
      assert.throws(
        () => capability.verifyCapability(key, segment, request("cv-three")),
        refused(/issued for configuration-versions cv-two/),
      );
      assert.throws(
        () => capability.verifyCapability(key, segment, { ...request("cv-two"), kind: "state-versions" }),
        refused(/issued for/),
      );
    });

    test("after its expiry it is refused, unless the object says it is still valid", async () => {
      const key = await capability.capabilityKey(ctx);
      const log = { method: "GET" as const, kind: "plans", id: "plan-1", expiresAt: clock + 1000 };
      const segment = capability.signCapability(key, log);
      const at = (now: number, stillValid?: boolean) => ({
        method: "GET",
        kind: "plans",
        id: "plan-1",
        now,
        stillValid,
      });
      capability.verifyCapability(key, segment, at(clock + 1000));
      assert.throws(() => capability.verifyCapability(key, segment, at(clock + 1001)), refused(/expired/));
      capability.verifyCapability(key, segment, at(clock + 1001, true));
    });

    test("an altered payload, a forged signature or another key is refused", async () => {
      const key = await capability.capabilityKey(ctx);
      const segment = capability.signCapability(key, upload("cv-four"));
      const [payload, signature] = segment.split(".") as [string, string];
      // The payload rewritten to another object, with the original signature.
      const altered = Buffer.from(
        JSON.stringify({ m: "PUT", k: "configuration-versions", i: "cv-five", e: clock + 60_000 }),
      );
      assert.throws(
        () => capability.verifyCapability(key, `${altered.toString("base64url")}.${signature}`, request("cv-five")),
        refused(/signature does not match/),
      );
      assert.throws(
        () => capability.verifyCapability(key, `${payload}.AAAA`, request("cv-four")),
        refused(/signature/),
      );
      assert.throws(() => capability.verifyCapability(key, payload, request("cv-four")), refused(/no valid signature/));
      const otherKey = Buffer.alloc(32, 7);
      const forged = capability.signCapability(otherKey, upload("cv-four"));
      assert.throws(
        () => capability.verifyCapability(key, forged, request("cv-four")),
        refused(/signature does not match/),
      );
    });

    test("a spent nonce is forgotten only once its URL has expired", async () => {
      const key = await capability.capabilityKey(ctx);
      const c = upload("cv-six", "nonce-six");
      await capability.spendCapability(
        ctx,
        capability.verifyCapability(key, capability.signCapability(key, c), request("cv-six")),
      );
      clock += 120_000;
      // Cleared now that it expired; the URL itself is refused as expired.
      await capability.spendCapability(ctx, { ...upload("cv-seven") });
      const left = await ctx.db
        .selectFrom("capability_uses")
        .select("nonce")
        .where("nonce", "=", "nonce-six")
        .execute();
      assert.equal(left.length, 0);
      assert.throws(
        () => capability.verifyCapability(key, capability.signCapability(key, c), request("cv-six")),
        refused(/expired/),
      );
    });
  });
}
