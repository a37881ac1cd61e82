import { gzipSync } from "node:zlib";

/** One raw tar entry for hand-made (including malicious) archives. */
export interface RawEntry {
  path: string;
  type?: "file" | "dir" | "symlink" | "hardlink" | "chardev" | "fifo";
  content?: string;
  linkpath?: string;
}

const typeFlags = { file: "0", hardlink: "1", symlink: "2", chardev: "3", dir: "5", fifo: "6", pax: "x" } as const;

function header(e: RawEntry | { path: string; type: "pax"; linkpath?: undefined }, size: number): Buffer {
  const h = Buffer.alloc(512, 0);
  const write = (s: string, off: number, len: number) => h.write(s.slice(0, len), off, len, "utf8");
  const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, "0") + "\0";
  write(e.path, 0, 100);
  write(octal(e.type === "dir" ? 0o755 : 0o644, 8), 100, 8);
  write(octal(0, 8), 108, 8);
  write(octal(0, 8), 116, 8);
  write(octal(size, 12), 124, 12);
  write(octal(Math.floor(Date.now() / 1000), 12), 136, 12);
  h.fill(" ", 148, 156);
  write(typeFlags[e.type ?? "file"], 156, 1);
  if (e.linkpath) write(e.linkpath, 157, 100);
  write("ustar\0", 257, 6);
  write("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  write(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  return h;
}

/** Builds a tar.gz byte for byte, so tests can make archives tar itself would refuse to write. */
export function rawTarGz(entries: RawEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    // Names longer than the ustar fields travel in a pax header, as tar writes them.
    const records = [
      ["path", e.path],
      ["linkpath", e.linkpath ?? ""],
    ]
      .filter(([, v]) => Buffer.byteLength(v ?? "") > 100)
      .map(([k, v]) => paxRecord(`${k}=${v}`));
    if (records.length > 0) {
      const pax = Buffer.concat(records);
      parts.push(
        header({ path: "PaxHeader", type: "pax" }, pax.length),
        pax,
        Buffer.alloc((512 - (pax.length % 512)) % 512),
      );
    }
    const body = Buffer.from(e.type === undefined || e.type === "file" ? (e.content ?? "") : "", "utf8");
    parts.push(header(e, body.length), body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(parts));
}

/** One pax record, `<length> key=value\n`, whose length counts its own digits. */
function paxRecord(keyValue: string): Buffer {
  const rest = Buffer.byteLength(keyValue) + 2;
  let len = rest + String(rest).length;
  if (String(len).length !== String(rest).length) len++;
  return Buffer.from(`${len} ${keyValue}\n`, "utf8");
}

/**
 * The security review's N3 archive: a symlink whose target names one directory of `depth`
 * backslash-joined parts followed by `depth` "..", then `target`. On Linux the backslashes
 * are ordinary characters, so the link climbs `depth` levels above its directory.
 */
export function backslashLinkEntries(depth: number, target: string, name = "S"): RawEntry[] {
  const dirs = Array.from({ length: depth }, (_, i) => `b${i}`).join("\\");
  return [{ path: name, type: "symlink", linkpath: `${dirs}/${"../".repeat(depth)}${target}` }];
}
