import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { DroverError } from "@drover/protocol";
import type { FastifyRequest } from "fastify";
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

/** The MAC covers what the URL is for; only the expiry and the nonce travel (path segments are short). */
function mac(key: Buffer, c: Omit<Capability, "method"> & { method: string }): string {
  return createHmac("sha256", key)
    .update([c.method, c.kind, c.id, String(c.expiresAt), c.nonce ?? ""].join("\n"))
    .digest("base64url");
}

/** A new nonce for an upload URL. */
export const newNonce = (): string => randomBytes(16).toString("base64url");

/** The path segment that carries `c`: `<expiry>.<nonce>.<mac>` (the nonce empty when there is none). */
export function signCapability(key: Buffer, c: Capability): string {
  return `${c.expiresAt.toString(36)}.${c.nonce ?? ""}.${mac(key, c)}`;
}

const refused = (why: string): DroverError => new DroverError("forbidden", `this URL is refused: ${why}`);

/**
 * Checks a capability segment against the request it came with: the MAC must be the one of
 * this method, this object and the segment's expiry and nonce. `now` past the expiry is refused
 * unless `stillValid` (a log whose phase is still running) says otherwise. Does not spend the
 * nonce: spendCapability does, once the request is otherwise acceptable.
 */
export function verifyCapability(
  key: Buffer,
  segment: string,
  request: { method: string; kind: string; id: string; now: number; stillValid?: boolean },
): Capability {
  const parts = segment.split(".");
  const [expiry, nonce, signature] = parts;
  const expiresAt = parseInt(expiry ?? "", 36);
  if (parts.length !== 3 || !signature || !/^[0-9a-z]{1,12}$/.test(expiry ?? "") || !Number.isSafeInteger(expiresAt))
    throw refused("it carries no valid signature");
  const method = request.method === "HEAD" ? "GET" : request.method;
  const c = { method, kind: request.kind, id: request.id, expiresAt, nonce: nonce || undefined };
  const expected = Buffer.from(mac(key, c));
  const given = Buffer.from(signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw refused(`it was not issued for ${method} of ${request.kind} ${request.id}, or its signature is wrong`);
  if (request.now > expiresAt && request.stillValid !== true)
    throw refused(`it expired at ${new Date(expiresAt).toISOString()}; ask for the object again to get a new one`);
  return { method: method === "PUT" ? "PUT" : "GET", kind: c.kind, id: c.id, expiresAt, nonce: c.nonce };
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

/**
 * Runs `use` with the URL's nonce spent. When `use` fails on the server's side (a 5xx: a full disk,
 * a database that cannot be written), the nonce is given back: the upload did not happen, and the
 * client's retry of the same URL must not be refused as a replay. A refusal (4xx) keeps it spent.
 */
export async function usingCapability<T>(ctx: StoreContext, c: Capability, use: () => Promise<T>): Promise<T> {
  await spendCapability(ctx, c);
  try {
    return await use();
  } catch (err) {
    if (c.nonce !== undefined && !(err instanceof DroverError && err.status < 500))
      // The write's own error is the answer; if the nonce cannot be given back either, it stays spent.
      await ctx.db
        .deleteFrom("capability_uses")
        .where("nonce", "=", c.nonce)
        .execute()
        .catch(() => undefined);
    throw err;
  }
}

/** When each request's capability was first checked: an upload's is checked again once its body is in. */
const firstChecked = new WeakMap<FastifyRequest, number>();

/**
 * The capability in `req`'s path (its `:capability` parameter), checked for `kind` and `id`:
 * verifyCapability of the request as it came. Its expiry is judged at the request's first check,
 * so an upload that began in time is not refused for the time its body took to arrive.
 */
export async function requestCapability(
  ctx: StoreContext,
  req: FastifyRequest,
  kind: string,
  id: string,
): Promise<Capability> {
  const segment = (req.params as { capability?: string }).capability ?? "";
  const now = firstChecked.get(req) ?? ctx.now();
  firstChecked.set(req, now);
  return verifyCapability(await capabilityKey(ctx), segment, { method: req.method, kind, id, now });
}
