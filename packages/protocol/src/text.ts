import { z } from "zod";

/*
 * Free text people type or programs produce ends up printed in other people's terminals:
 * control characters (ANSI escapes above all) must never travel through it raw.
 */

// C0 controls, DEL, C1 controls, and the Unicode bidi overrides that reorder what a terminal shows.
// eslint-disable-next-line no-control-regex
const controlChars = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
// eslint-disable-next-line no-control-regex
const controlCharsExceptLayout = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** Whether `text` holds a control character. */
export function hasControlChars(text: string): boolean {
  return controlChars.test(text);
}

/** Replaces control characters other than newline and tab with a visible `\u{..}` form. */
export function escapeControlChars(text: string): string {
  return text.replace(controlCharsExceptLayout, (c) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`);
}

/** A one-line free-text field (descriptions, versions): control characters are refused. */
export function singleLineText(max: number) {
  return z
    .string()
    .max(max)
    .refine((s) => !hasControlChars(s), "must not contain control characters (escape sequences, newlines, tabs)");
}

/**
 * The first sentence of an error text, on one line: terraform wraps a long error at 80 columns,
 * so the lines of the first paragraph are joined before the cut at its first full stop.
 */
export function firstSentence(text: string): string {
  const paragraph = (text.trim().split(/\n\s*\n/)[0] ?? "")
    .split("\n")
    .map((l) => l.trim())
    .join(" ");
  const end = /[.!?](?=\s|$)/.exec(paragraph);
  return end ? paragraph.slice(0, end.index + 1) : paragraph;
}
