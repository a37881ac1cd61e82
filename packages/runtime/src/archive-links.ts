import { DroverError } from "@drover/protocol";

// Where an archive's links lead once it is unpacked: a symlink or hard link that leaves the
// unpack root, directly or through other links of the same archive, refuses the archive.

/** Symlinks followed while resolving one path before it counts as a loop. */
const maxLinkHops = 40;

export type EntryType = "File" | "Directory" | "SymbolicLink" | "Link";
/** One entry of an archive as the link check sees it. */
export interface Entry {
  path: string;
  type: EntryType;
  linkpath: string;
}

const invalid = (message: string) => new DroverError("invalid_archive", message);

/** The components of an archive path as Linux reads it ("\\" is part of a name). */
const parts = (path: string): string[] => path.split("/").filter((p) => p !== "" && p !== ".");

/**
 * Resolves `target` from directory `from` through the archive's own symlinks, as the file
 * system will once it is unpacked. Returns why it leaves the root, or undefined.
 */
function escapeReason(from: string[], target: string, links: Map<string, string>): string | undefined {
  const stack = [...from];
  let queue = target.split("/");
  let hops = 0;
  while (queue.length > 0) {
    const part = queue.shift() as string;
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (stack.length === 0) return "leaves the archive root";
      stack.pop();
      continue;
    }
    stack.push(part);
    const link = links.get(stack.join("/"));
    if (link !== undefined) {
      if (++hops > maxLinkHops) return "is a loop of links";
      stack.pop();
      queue = [...link.split("/"), ...queue];
    }
  }
  return undefined;
}

/**
 * The unpacker reads "\\" in a symlink's target as a separator when it checks the target, and
 * refuses one that then leaves the root; so does this check, or an archive it accepts would
 * fail to unpack.
 */
function backslashEscape(from: string[], target: string): string | undefined {
  const stack = [...from];
  for (const part of target.split(/[\\/]/)) {
    if (part === "" || part === ".") continue;
    if (part !== "..") stack.push(part);
    else if (stack.pop() === undefined)
      return "leaves the archive root when '\\' is read as a separator (as node-tar does)";
  }
  return undefined;
}

/** Refuses links that resolve, through other links of the archive, outside its root; and entries written through a link. */
export function checkLinks(entries: Entry[]): void {
  const links = new Map<string, string>();
  for (const e of entries) if (e.type === "SymbolicLink") links.set(parts(e.path).join("/"), e.linkpath);
  if (links.size === 0 && !entries.some((e) => e.type === "Link")) return;
  for (const e of entries) {
    const p = parts(e.path);
    // A parent that is a link would make the unpacker write wherever that link points.
    for (let i = 1; i < p.length; i++) {
      if (links.has(p.slice(0, i).join("/")))
        throw invalid(
          `archive entry ${JSON.stringify(e.path)} lies under the link ${JSON.stringify(p.slice(0, i).join("/"))}`,
        );
    }
    if (e.type === "SymbolicLink" || e.type === "Link") {
      // Symlinks resolve against their own directory, hard links against the root.
      const from = e.type === "SymbolicLink" ? p.slice(0, -1) : [];
      const backslashed = e.type === "SymbolicLink" ? backslashEscape(from, e.linkpath) : undefined;
      const reason = escapeReason(from, e.linkpath, links) ?? backslashed;
      if (reason)
        throw invalid(
          `archive link ${JSON.stringify(e.path)} points to ${JSON.stringify(e.linkpath)}, outside the archive: resolved through the archive's links it ${reason}`,
        );
    }
    if (e.type === "Link") {
      // link(2) would link the symlink itself, and the unpacker refuses a hard link whose target is or
      // passes through a symlink: refused here as well, so that an accepted archive always unpacks.
      const target = parts(e.linkpath);
      for (let i = 1; i <= target.length; i++) {
        const prefix = target.slice(0, i).join("/");
        if (!links.has(prefix)) continue;
        const what = `archive hard link ${JSON.stringify(e.path)} points to ${JSON.stringify(e.linkpath)}`;
        throw invalid(`${what} through the symbolic link ${JSON.stringify(prefix)}; link to the file itself`);
      }
    }
  }
}
