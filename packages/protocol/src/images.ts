import { z } from "zod";

/*
 * Container image references, as a workspace names its runner image and as an agent's
 * allow-list names the images workspaces may choose. The grammar is Docker's reference grammar
 * (an optional registry host with port, lower-case path components, a tag and/or a digest),
 * so a value is never a flag, a path or anything a shell or the Engine API would read otherwise.
 */

const component = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const host =
  "(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?";
const referencePattern = new RegExp(
  `^${host}${component}(?:/${component})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$`,
);

/** Whether `s` is a well-formed image reference (`[host[:port]/]path[:tag][@sha256:…]`, at most 255 characters). */
export function isImageReference(s: string): boolean {
  return s.length <= 255 && referencePattern.test(s);
}

/** A workspace's runner image: a well-formed image reference. */
export const imageReferenceSchema = z
  .string()
  .max(255)
  .refine(
    isImageReference,
    "must be an image reference such as registry.example.com/team/runner:1.2 (lower-case path, optional tag and @sha256 digest)",
  );

/**
 * Whether `image` matches one of `patterns`: an exact reference, or a prefix ending in `*` that
 * matches every reference starting with it (`registry.example.com/runners/*`). A lone `*`
 * matches every image.
 */
export function imageAllowed(image: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => (p.endsWith("*") ? image.startsWith(p.slice(0, -1)) : image === p));
}

/** Whether `p` is a valid allow-list entry: a reference, `*`, or a reference's prefix ending in `*`. */
export function isImagePattern(p: string): boolean {
  if (p === "*") return true;
  if (!p.endsWith("*")) return isImageReference(p);
  // The prefix must be the start of some valid reference: completing it with a name component makes one.
  const prefix = p.slice(0, -1);
  return (
    !prefix.includes("*") &&
    (isImageReference(`${prefix}x`) || isImageReference(`${prefix}/x`) || isImageReference(prefix.replace(/[:@]$/, "")))
  );
}
