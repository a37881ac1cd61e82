import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { DroverError } from "@drover/protocol";
import type { StoreContext } from "../store/context.js";

/*
 * Capability URLs: the few TFE URLs terraform calls without its token (configuration upload,
 * state uploads, log reads). The URL itself is the credential, so each carries a signature
 * that binds it to one HTTP method, one object (kind and id) and an expiry; an upload's also
 * carries a nonce that is spent on first use, so a leaked upload URL cannot be replayed. The
 * signature travels in the path: terraform replaces a log URL's query string with its own.
 */

/** What a capability allows. */
export interface Capability {
  method: "GET" | "PUT";
  /** The object's kind, as the route names it: "configuration-versions", "plans", … */
  kind: string;
  id: string;
  /** Milliseconds since the epoch after which the URL is refused. */
  expiresAt: number;
  /** Set for uploads: the URL works once. */
  nonce?: string | undefined;
}

interface Payload {
  m: string;
  k: string;
  i: string;
  e: number;
  n?: string;
}

const keyName = "capability";
const keys = new WeakMap<StoreContext, Promise<Buffer>>();

/**
 * The server's signing key: made once by the first server that needs it and stored, so every
 * replica signs and checks with the same one and a restart keeps issued URLs valid.
 */
export function capabilityKey(ctx: StoreContext): Promise<Buffer> {
  let key = keys.get(ctx);
  if (!key) {
    key = loadKey(ctx);
    keys.set(ctx, key);
    key.catch(() => keys.delete(ctx));
  }
  return key;
}

async function loadKey(ctx: StoreContext): Promise<Buffer> {
  // Two servers starting together both insert; the loser's row is dropped and both read the winner's.
  await ctx.db
    .insertInto("server_keys")
    .values({ name: keyName, key: randomBytes(32), created_at: ctx.now() })
    .onConflict((oc) => oc.column("name").doNothing())
    .execute();
  const row = await ctx.db
    .selectFrom("server_keys")
    .select("key")
    .where("name", "=", keyName)
    .executeTakeFirstOrThrow();
  return Buffer.from(row.key);
}

const mac = (key: Buffer, payload: string): Buffer => createHmac("sha256", key).update(payload).digest();

/** A new nonce for an upload URL. */
export const newNonce = (): string => randomBytes(16).toString("base64url");

/** The path segment that carries `c`: the signed payload and its HMAC, both base64url. */
export function signCapability(key: Buffer, c: Capability): string {
  const p: Payload = { m: c.method, k: c.kind, i: c.id, e: c.expiresAt, ...(c.nonce ? { n: c.nonce } : {}) };
  const payload = Buffer.from(JSON.stringify(p)).toString("base64url");
  return `${payload}.${mac(key, payload).toString("base64url")}`;
}

const refused = (why: string): DroverError => new DroverError("forbidden", `this URL is refused: ${why}`);

/**
 * Checks a capability segment against the request it came with. `now` past the expiry is
 * refused unless `stillValid` (a log whose phase is still running) says otherwise. Does not
 * spend the nonce: spendCapability does, once the request is otherwise acceptable.
 */
export function verifyCapability(
  key: Buffer,
  segment: string,
  request: { method: string; kind: string; id: string; now: number; stillValid?: boolean },
): Capability {
  const [payload, signature, extra] = segment.split(".");
  if (!payload || !signature || extra !== undefined) throw refused("it carries no valid signature");
  const expected = mac(key, payload);
  const given = Buffer.from(signature, "base64url");
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw refused("its signature does not match");
  // Signed by this server: the payload is its own JSON.
  const p = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Payload;
  const method = request.method === "HEAD" ? "GET" : request.method;
  if (p.m !== method) throw refused(`it allows ${p.m}, not ${request.method}`);
  if (p.k !== request.kind || p.i !== request.id) throw refused(`it was issued for ${p.k} ${p.i}, not this one`);
  if (request.now > p.e && request.stillValid !== true)
    throw refused(`it expired at ${new Date(p.e).toISOString()}; ask for the object again to get a new one`);
  return { method: p.m === "PUT" ? "PUT" : "GET", kind: p.k, id: p.i, expiresAt: p.e, nonce: p.n };
}

/** Spends an upload URL's nonce; a second use is refused. Expired uses are cleared on the way. */
export async function spendCapability(ctx: StoreContext, c: Capability): Promise<void> {
  if (c.nonce === undefined) return;
  const now = ctx.now();
  await ctx.db.deleteFrom("capability_uses").where("expires_at", "<", now).execute();
  const spent = await ctx.db
    .insertInto("capability_uses")
    .values({ nonce: c.nonce, expires_at: c.expiresAt })
    .onConflict((oc) => oc.column("nonce").doNothing())
    .executeTakeFirst();
  if (Number(spent.numInsertedOrUpdatedRows ?? 0n) !== 1)
    throw refused("it was already used; an upload URL works once");
}
