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
        refused(/not issued for GET of configuration-versions cv-two/),
      );
      assert.throws(
        () => capability.verifyCapability(key, segment, request("cv-three")),
        refused(/not issued for PUT of configuration-versions cv-three/),
      );
      assert.throws(
        () => capability.verifyCapability(key, segment, { ...request("cv-two"), kind: "state-versions" }),
        refused(/not issued for PUT of state-versions cv-two/),
      );
    });

    test("an upload that began before the expiry is not refused for the time its body took", async () => {
      const key = await capability.capabilityKey(ctx);
      const segment = capability.signCapability(key, upload("cv-slow"));
      type Req = Parameters<typeof capability.requestCapability>[1];
      const req = () => ({ method: "PUT", params: { capability: segment } }) as unknown as Req;
      const slow = req();
      // Checked as the request arrives (before its body), then again once the body is in.
      await capability.requestCapability(ctx, slow, "configuration-versions", "cv-slow");
      clock += 120_000;
      const c = await capability.requestCapability(ctx, slow, "configuration-versions", "cv-slow");
      assert.equal(c.id, "cv-slow");
      // A request that arrives after the expiry is refused.
      await assert.rejects(
        capability.requestCapability(ctx, req(), "configuration-versions", "cv-slow"),
        refused(/expired/),
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

    test("an extended expiry, another nonce, a forged signature or another key is refused", async () => {
      const key = await capability.capabilityKey(ctx);
      const segment = capability.signCapability(key, upload("cv-four", "nonce-four"));
      const [expiry, nonce, signature] = segment.split(".") as [string, string, string];
      const wrong = /not issued for PUT of configuration-versions cv-four, or its signature is wrong/;
      // A later expiry with the original signature.
      const later = (parseInt(expiry, 36) + 3_600_000).toString(36);
      assert.throws(
        () => capability.verifyCapability(key, `${later}.${nonce}.${signature}`, request("cv-four")),
        refused(wrong),
      );
      // Another nonce, so that a spent URL would look fresh.
      assert.throws(
        () => capability.verifyCapability(key, `${expiry}.other.${signature}`, request("cv-four")),
        refused(wrong),
      );
      assert.throws(
        () => capability.verifyCapability(key, `${expiry}.${nonce}.AAAA`, request("cv-four")),
        refused(wrong),
      );
      assert.throws(
        () => capability.verifyCapability(key, `${expiry}.${nonce}`, request("cv-four")),
        refused(/no valid signature/),
      );
      assert.throws(() => capability.verifyCapability(key, "x", request("cv-four")), refused(/no valid signature/));
      const forged = capability.signCapability(Buffer.alloc(32, 7), upload("cv-four", "nonce-four"));
      assert.throws(() => capability.verifyCapability(key, forged, request("cv-four")), refused(wrong));
      assert.ok(segment.length < 100, "fits in a path parameter");
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
