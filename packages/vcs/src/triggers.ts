/*
 * Which commits of a linked branch start a run. Without trigger paths, every new commit does.
 * With them, a commit does when a file it changed (against the commit last seen) matches one of
 * the globs or lies in the workspace's working directory; when the changed files cannot be known
 * (the first commit, a history rewritten), it does.
 */

/** A glob as a regular expression: `**` crosses directories, `*` and `?` stay within one; `dir/` is `dir/**`. */
export function globPattern(glob: string): RegExp {
  const g = glob.endsWith("/") ? `${glob}**` : glob;
  let out = "";
  for (let i = 0; i < g.length; i++) {
    const c = g[i]!;
    if (c === "*" && g[i + 1] === "*") {
      // `**/` also matches no directory at all.
      if (g[i + 2] === "/") {
        out += "(?:.*/)?";
        i += 2;
      } else {
        out += ".*";
        i += 1;
      }
    } else if (c === "*") out += "[^/]*";
    else if (c === "?") out += "[^/]";
    else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${out}$`);
}

/** Whether a commit that changed `changed` (null: unknown) starts a run of the workspace. */
export function commitTriggers(changed: string[] | null, triggerPaths: string[], workingDirectory: string): boolean {
  if (triggerPaths.length === 0 || changed === null) return true;
  const patterns = triggerPaths.map(globPattern);
  const dir = workingDirectory.replace(/^\.\/?/, "").replace(/\/+$/, "");
  return changed.some((file) => (dir !== "" && file.startsWith(`${dir}/`)) || patterns.some((p) => p.test(file)));
}
