/**
 * A local-exec provisioner printing numbered lines, and the reader that finds them again in
 * terraform's output, for tests that check a log holds every line once, in order.
 *
 * Terraform reads the command's output through a line reader that flushes a partial line when
 * the rest is slow to come (about 100 ms: a loaded machine, or `seq` between two 4 KiB writes).
 * Each piece is printed as its own `… (local-exec): ` line, with trailing whitespace trimmed and
 * whitespace-only pieces left out. The command's text is therefore only recoverable up to
 * whitespace at a piece boundary: "line 000123 xxx" may come back as "lin" + "e 000123 xxx" or as
 * "line" + "000123 xxx". The reader joins the pieces and ignores whitespace, so a split line
 * counts once wherever it was split, and a lost or doubled line still fails.
 */

/** The shell command printing `line 000001 xxx…` to `line <count> xxx…` (39 bytes a line). */
export function numberedLinesCommand(count: number): string {
  return `seq -f 'line %06g ${"x".repeat(26)}' 1 ${count}`;
}

/**
 * Numbers of the numbered lines in terraform's output, in the order they appear; -1 stands for
 * text between them that is not one of them (so a count or order check fails on it).
 */
export function printedLines(text: string): number[] {
  let joined = "";
  for (const m of text.matchAll(/\(local-exec\): (.*)$/gm)) {
    const piece = m[1]!;
    if (piece.startsWith("Executing: [")) continue;
    joined += piece;
  }
  joined = joined.replace(/\s+/g, "");
  const out: number[] = [];
  const one = /line(\d{6})x{26}/y;
  let at = 0;
  while (at < joined.length) {
    one.lastIndex = at;
    const m = one.exec(joined);
    if (m) {
      out.push(Number(m[1]));
      at = one.lastIndex;
      continue;
    }
    out.push(-1);
    const next = joined.indexOf("line", at + 1);
    at = next < 0 ? joined.length : next;
  }
  return out;
}
