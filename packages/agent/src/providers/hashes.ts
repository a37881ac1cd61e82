import { createHash } from "node:crypto";
import { createReadStream, lstatSync, readdirSync, type Stats } from "node:fs";
import { join } from "node:path";

/** The files under `dir` (relative, '/'-separated, sorted as Go sorts strings). */
function files(dir: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, prefix))) {
    const rel = prefix ? `${prefix}/${name}` : name;
    if (lstatSync(join(dir, rel)).isDirectory()) out.push(...files(dir, rel));
    else out.push(rel);
  }
  return out;
}

/** sha256 of a file, hex. */
export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/**
 * terraform's `h1:` hash of an unpacked provider directory: base64 of the sha256 over the lines
 * "<hex sha256>  <relative path>\n" of its files in byte order.
 */
export async function packageHashV1(dir: string): Promise<string> {
  const names = files(dir).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const summary = createHash("sha256");
  for (const name of names) summary.update(`${await sha256File(join(dir, name))}  ${name}\n`);
  return `h1:${summary.digest("base64")}`;
}

/**
 * What identifies the exact bytes of a tree without reading them: every node's inode, size,
 * mode, and change time. No one without root can set a change time, so an unchanged
 * fingerprint means an unchanged tree since it was last hashed.
 */
export function treeFingerprint(dir: string): string {
  const parts: string[] = [];
  const visit = (rel: string): void => {
    const st: Stats = lstatSync(join(dir, rel));
    parts.push(`${rel}|${st.ino}|${st.size}|${st.mode}|${st.ctimeMs}|${st.mtimeMs}`);
    if (st.isDirectory()) for (const name of readdirSync(join(dir, rel)).sort()) visit(rel ? `${rel}/${name}` : name);
  };
  visit("");
  return parts.join("\n");
}

/** Bytes a tree takes (file sizes). */
export function treeBytes(dir: string): number {
  let total = 0;
  const visit = (path: string): void => {
    const st = lstatSync(path);
    if (st.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
    else total += st.size;
  };
  visit(dir);
  return total;
}
