import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * Browser sessions (store/web-sessions.ts) on both databases: a session stands for the API token
 * it was made with, for its lifetime, until it is signed out or that token stops working.
 */

async function rejectsWith(promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(
    promise,
    (err: unknown) => err instanceof DroverError && err.code === code && message.test(err.message),
  );
}

const hour = 60 * 60 * 1000;

for (const backend of backends) {
  describe(`web sessions: ${backend}`, () => {
    let clock = 1_700_000_000_000;
    let ctx: StoreContext;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, c) => (ctx = c),
    );
    let userToken: { id: string; token: string };
    before(async () => {
      userToken = await store.createUserToken(ctx, "browser");
      // Kept valid, so revoking `userToken` is allowed (it is not the last one).
      await store.createUserToken(ctx, "spare");
    });

    test("a session stands for its API token until it expires", async () => {
      const session = await store.createWebSession(ctx, userToken.token, 12 * hour);
      assert.match(session.token, /^drv_w_wses-[0-9a-z]{16}\./);
      assert.equal(session.expiresAt, clock + 12 * hour);
      const found = await store.authenticateWebSession(ctx, session.token);
      assert.deepEqual(found, { sessionId: session.id, tokenId: userToken.id, expiresAt: session.expiresAt });
      clock += 12 * hour;
      await rejectsWith(store.authenticateWebSession(ctx, session.token), "unauthorized", /expired; sign in again/);
    });

    test("sign-out ends the session at once, and only that one", async () => {
      const a = await store.createWebSession(ctx, userToken.token, hour);
      const b = await store.createWebSession(ctx, userToken.token, hour);
      await store.endWebSession(ctx, a.id);
      await rejectsWith(store.authenticateWebSession(ctx, a.token), "unauthorized", /signed out/);
      assert.equal((await store.authenticateWebSession(ctx, b.token)).sessionId, b.id);
    });

    test("an unknown, forged or altered session cookie is refused", async () => {
      const real = await store.createWebSession(ctx, userToken.token, hour);
      for (const forged of [`${real.token}x`, real.token.slice(0, -1), "drv_w_wses-0000000000000000.abc", ""]) {
        await rejectsWith(store.authenticateWebSession(ctx, forged), "unauthorized", /unknown/);
      }
    });

    test("only a working API token signs in; revoking or expiring it ends its sessions", async () => {
      await rejectsWith(store.createWebSession(ctx, "drv_u_nobody.secret", hour), "unauthorized", /unknown API token/);
      const shortLived = await store.createUserToken(ctx, "short", clock + hour);
      const ofShort = await store.createWebSession(ctx, shortLived.token, 12 * hour);
      const ofRevoked = await store.createWebSession(ctx, userToken.token, 12 * hour);
      await store.revokeUserToken(ctx, userToken.id);
      await rejectsWith(store.authenticateWebSession(ctx, ofRevoked.token), "token_revoked", /was revoked/);
      await rejectsWith(store.createWebSession(ctx, userToken.token, hour), "token_revoked", /revoked/);
      assert.equal((await store.authenticateWebSession(ctx, ofShort.token)).tokenId, shortLived.id);
      clock += hour;
      await rejectsWith(store.authenticateWebSession(ctx, ofShort.token), "unauthorized", /token .* has expired/);
    });
  });
}
