/*
 * Drover's pull-request comment carries its report's marker as a hidden HTML comment, so the
 * comment can be found again when the answer to its creation was lost: a retry edits it instead
 * of posting a second one. The marker names one report of one server and is not guessable before
 * the comment exists; of several comments carrying it (someone copied it later), the oldest is
 * Drover's.
 */

/** How many pages of a pull request's comments are read looking for the marked one. */
export const markedCommentPages = 10;

/** The comment's text as posted: the body, then the hidden marker line (when there is a marker). */
export function markedBody(body: string, marker: string | undefined): string {
  return marker === undefined ? body : `${body}\n\n${markerLine(marker)}`;
}

/** Whether a posted comment carries `marker` (on a line of its own, whatever line ends the provider keeps). */
export function hasMarker(body: string | null | undefined, marker: string): boolean {
  const line = markerLine(marker);
  return (body ?? "").split("\n").some((l) => l.trim() === line);
}

function markerLine(marker: string): string {
  return `<!-- ${marker} -->`;
}
