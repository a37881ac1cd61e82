import { csrfHeader, csrfTokenOf, DroverError, webSessionCookie } from "@drover/protocol";
import type { FastifyRequest } from "fastify";
import { timingSafeEqual } from "node:crypto";
import type { StoreContext } from "../store/context.js";
import { authenticateWebSession } from "../store/web-sessions.js";

/** A user API caller signed in through a browser session rather than a bearer token. */
export interface WebCaller {
  sessionId: string;
  expiresAt: number;
  csrfToken: string;
}

/** Methods that change nothing; any other one sent with the session cookie needs the CSRF header. */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/** The session cookie's value in the request's Cookie header, if it has one. */
export function sessionCookieOf(request: FastifyRequest): string | undefined {
  const header = request.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0 || part.slice(0, eq).trim() !== webSessionCookie) continue;
    const value = part.slice(eq + 1).trim();
    return value === "" ? undefined : value;
  }
  return undefined;
}

/**
 * Authenticates a request by its session cookie. A request that may change something must also
 * carry the session's CSRF token in its header: a form or script of another site can make the
 * browser send the cookie, but cannot read the token.
 */
export async function requireWebSession(
  ctx: StoreContext,
  request: FastifyRequest,
  cookie: string,
): Promise<{ tokenId: string; web: WebCaller }> {
  const session = await authenticateWebSession(ctx, cookie);
  const csrfToken = csrfTokenOf(cookie);
  if (!safeMethods.has(request.method)) {
    const sent = request.headers[csrfHeader];
    const a = Buffer.from(typeof sent === "string" ? sent : "");
    const b = Buffer.from(csrfToken);
    if (!(a.length === b.length && timingSafeEqual(a, b)))
      throw new DroverError(
        "forbidden",
        `a ${request.method} with the session cookie must carry the session's CSRF token in the ${csrfHeader} header`,
      );
  }
  return { tokenId: session.tokenId, web: { sessionId: session.sessionId, expiresAt: session.expiresAt, csrfToken } };
}

/**
 * The Set-Cookie value of a new session: HttpOnly (no script reads it), SameSite=Strict (no other
 * site's page sends it), Secure when the browser reached the server over TLS.
 */
export function sessionCookieHeader(token: string, maxAgeMs: number, secure: boolean): string {
  const attributes = ["Path=/", "HttpOnly", "SameSite=Strict", `Max-Age=${Math.floor(maxAgeMs / 1000)}`];
  if (secure) attributes.push("Secure");
  return `${webSessionCookie}=${token}; ${attributes.join("; ")}`;
}

/** The Set-Cookie value that makes the browser forget its session cookie. */
export function clearedSessionCookieHeader(secure: boolean): string {
  return sessionCookieHeader("", 0, secure);
}

/**
 * Whether a request's Origin (when the browser sent one) is this server: the public URL's origin
 * (a proxy in front may hand on a Host of its own), or the host the request's Host names.
 */
export function sameOrigin(request: FastifyRequest, publicUrl: string): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return true;
  try {
    const page = new URL(origin);
    return page.origin === new URL(publicUrl).origin || page.host === request.headers.host;
  } catch {
    return false;
  }
}
