import { randomBytes } from "node:crypto";

/** Resource id prefixes; the prefix tells a reader what an id refers to. */
export type IdPrefix =
  "pool" | "ptok" | "agent" | "ws" | "cv" | "run" | "job" | "sv" | "utok" | "wses" | "vcs" | "vdl" | "vrp" | "vtask";

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz";

/** A new random id such as `run-8f3k2m9q1x7c5v0b` (80 bits of randomness). */
export function newId(prefix: IdPrefix): string {
  const bytes = randomBytes(16);
  let out = "";
  for (let i = 0; i < 16; i++) out += alphabet[(bytes[i] ?? 0) % 32];
  return `${prefix}-${out}`;
}

const idShape = /^(pool|ptok|agent|ws|cv|run|job|sv|utok|wses|vcs|vdl|vrp|vtask)-[0-9a-z]{16}$/i;

/** Whether a name has the shape of one of our ids; such names would shadow the object with that id in lookups. */
export function looksLikeId(name: string): boolean {
  return idShape.test(name);
}
