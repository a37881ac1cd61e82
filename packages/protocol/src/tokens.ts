import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { DroverError } from "./errors.js";

/**
 * Token formats. Every secret part is 32 random bytes; servers store only sha256 hashes.
 * - pool token:    drv_p_<base64url(JSON {url, pool})>.<secret>  (the URL rides along)
 * - session token: drv_s_<agentId>.<secret>
 * - job token:     drv_j_<jobId>.<attempt>.<secret>  (the attempt lets the server name a stale holder)
 * - user token:    drv_u_<tokenId>.<secret>
 * - web session:   drv_w_<sessionId>.<secret>  (a browser's session cookie, never a bearer token)
 * `.` never occurs in base64url or ids, so each form splits unambiguously.
 */
export type TokenKind = "pool" | "session" | "job" | "user" | "web";

const prefixes: Record<TokenKind, string> = {
  pool: "drv_p_",
  session: "drv_s_",
  job: "drv_j_",
  user: "drv_u_",
  web: "drv_w_",
};

function secret(): string {
  return randomBytes(32).toString("base64url");
}

/** sha256 hex of a token: what the server stores and looks up. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** Constant-time comparison of a presented token with a stored hash. */
export function tokenMatches(token: string, storedHash: string): boolean {
  const a = Buffer.from(hashToken(token), "hex");
  const b = Buffer.from(storedHash, "hex");
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Which kind of token a string is, judged by its prefix alone. */
export function tokenKind(token: string): TokenKind | undefined {
  for (const [kind, prefix] of Object.entries(prefixes) as [TokenKind, string][]) {
    if (token.startsWith(prefix)) return kind;
  }
  return undefined;
}

/** What a pool token says about itself. */
export interface PoolTokenClaims {
  url: string;
  pool: string;
}

/** A new pool token embedding the server URL and pool id. */
export function newPoolToken(claims: PoolTokenClaims): string {
  const head = Buffer.from(JSON.stringify({ url: claims.url, pool: claims.pool }), "utf8").toString("base64url");
  return `${prefixes.pool}${head}.${secret()}`;
}

/** Reads the public claims of a pool token; throws a DroverError naming what is wrong. */
export function parsePoolToken(token: string): PoolTokenClaims {
  const trimmed = token.trim();
  if (!trimmed.startsWith(prefixes.pool)) {
    throw new DroverError("unauthorized", "not a Drover pool token: it must start with drv_p_");
  }
  if (/\s/.test(trimmed))
    throw new DroverError(
      "unauthorized",
      "malformed pool token: it holds spaces or several lines; give the token alone",
    );
  const body = trimmed.slice(prefixes.pool.length);
  const dot = body.indexOf(".");
  if (dot <= 0 || dot === body.length - 1)
    throw new DroverError("unauthorized", "malformed pool token: expected drv_p_<claims>.<secret>");
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(body.slice(0, dot), "base64url").toString("utf8"));
  } catch (cause) {
    throw new DroverError("unauthorized", "malformed pool token: its claims are not base64url JSON", { cause });
  }
  if (typeof parsed !== "object" || parsed === null)
    throw new DroverError("unauthorized", "malformed pool token: claims are not an object");
  const { url, pool } = parsed as Record<string, unknown>;
  if (typeof url !== "string" || typeof pool !== "string") {
    throw new DroverError("unauthorized", "malformed pool token: claims lack url or pool");
  }
  return { url, pool };
}

/** A new session token for a registered agent. */
export function newSessionToken(agentId: string): string {
  return `${prefixes.session}${agentId}.${secret()}`;
}

/** A new job token for one attempt of one job. */
export function newJobToken(jobId: string, attempt: number): string {
  return `${prefixes.job}${jobId}.${attempt}.${secret()}`;
}

/** A new user/API token. */
export function newUserToken(tokenId: string): string {
  return `${prefixes.user}${tokenId}.${secret()}`;
}

/** A new browser session token (the session cookie's value). */
export function newWebSessionToken(sessionId: string): string {
  return `${prefixes.web}${sessionId}.${secret()}`;
}

/**
 * The CSRF token of a browser session: derived from the cookie's secret, so the server stores
 * nothing more, and a page of another site, which cannot read the cookie, cannot forge it.
 */
export function csrfTokenOf(webSessionToken: string): string {
  return createHash("sha256").update(`drover-csrf\0${webSessionToken}`, "utf8").digest("base64url");
}

/** The id part of a session, user or web session token, or undefined when malformed. */
export function tokenSubject(token: string, kind: "session" | "user" | "web"): string | undefined {
  const prefix = prefixes[kind];
  if (!token.startsWith(prefix)) return undefined;
  const rest = token.slice(prefix.length);
  const dot = rest.indexOf(".");
  return dot > 0 ? rest.slice(0, dot) : undefined;
}

/** Job id and attempt named by a job token, or undefined when malformed. */
export function parseJobToken(token: string): { jobId: string; attempt: number } | undefined {
  if (!token.startsWith(prefixes.job)) return undefined;
  const parts = token.slice(prefixes.job.length).split(".");
  if (parts.length !== 3 || !parts[0]) return undefined;
  const attempt = Number(parts[1]);
  if (!Number.isInteger(attempt) || attempt < 1) return undefined;
  return { jobId: parts[0], attempt };
}
