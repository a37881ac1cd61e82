import type { VcsProvider } from "@drover/protocol";
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";

/*
 * A webhook delivery checked and named as it arrives, by the server and by a VCS agent's listener
 * alike: the connection's proof (GitHub's HMAC of the body, GitLab's token), and the delivery id
 * that tells a retry from a new event.
 */

/**
 * Whether the headers may carry the connection's proof, checked before the body is read: GitLab's
 * token whole, GitHub's signature in its form (its HMAC needs the body).
 */
export function headersMayProve(provider: VcsProvider, secret: string, headers: IncomingHttpHeaders): boolean {
  return provider === "github"
    ? signatureOf(headers) !== undefined
    : verifyDelivery(provider, secret, headers, Buffer.alloc(0));
}

function signatureOf(headers: IncomingHttpHeaders): Buffer | undefined {
  const match = /^sha256=([0-9a-f]{64})$/i.exec(headerOf(headers, "x-hub-signature-256") ?? "");
  return match ? Buffer.from(match[1]!, "hex") : undefined;
}

/** Whether the delivery carries the connection's proof: GitHub's HMAC of the raw body, or GitLab's token. */
export function verifyDelivery(
  provider: VcsProvider,
  secret: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
): boolean {
  if (provider === "github") {
    const given = signatureOf(headers);
    return given !== undefined && timingSafeEqual(createHmac("sha256", secret).update(body).digest(), given);
  }
  const given = headerOf(headers, "x-gitlab-token");
  if (given === undefined) return false;
  // Digests of both: equal lengths, so the comparison takes the same time whatever was sent.
  const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();
  return timingSafeEqual(digest(given), digest(secret));
}

function headerOf(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

const printable = /^[\x21-\x7e]{1,200}$/;

/**
 * The provider's delivery id (a retry carries the same one) and event name. A GitLab without
 * either id: the body's digest, so a replay of the same body is still one delivery.
 */
export function deliveryHeaders(
  provider: VcsProvider,
  headers: IncomingHttpHeaders,
  body: Buffer,
): { deliveryId: string; event: string } {
  const pick = (...names: string[]) => names.map((n) => headerOf(headers, n)).find((v) => v !== undefined);
  // GitLab's Idempotency-Key is the one id a retry of the same event keeps; older GitLabs send
  // only the event UUID.
  const id =
    provider === "github"
      ? pick("x-github-delivery")
      : pick("idempotency-key", "x-gitlab-event-uuid", "x-gitlab-webhook-uuid");
  const event = (provider === "github" ? pick("x-github-event") : pick("x-gitlab-event")) ?? "unknown";
  return {
    deliveryId:
      id !== undefined && printable.test(id) ? id : `sha256:${createHash("sha256").update(body).digest("hex")}`,
    event: event.replace(/[^\x20-\x7e]/g, "").slice(0, 100) || "unknown",
  };
}
