import { DroverError } from "@drover/protocol";
import { existsSync, statSync } from "node:fs";

/** Paths never uploaded: local terraform state and caches, VCS metadata. */
export function excluded(path: string): boolean {
  const parts = path.replace(/^\.\//, "").split("/");
  const name = parts.at(-1) ?? "";
  return (
    parts.includes(".terraform") ||
    parts.includes(".git") ||
    /\.tfstate(\.|$)/.test(name) ||
    name === ".terraform.tfstate.lock.info"
  );
}

/** Packs a configuration directory as tar.gz in memory: files, directories and symlinks (as links). */
export async function packDirectory(dir: string): Promise<Buffer> {
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new DroverError("bad_request", `${dir} is not a directory`);
  const { create } = await import("tar");
  const chunks: Buffer[] = [];
  const stream = create(
    {
      gzip: true,
      cwd: dir,
      portable: true,
      follow: false,
      filter: (p, st) =>
        !excluded(p) &&
        !("isFIFO" in st && (st.isFIFO() || st.isSocket() || st.isCharacterDevice() || st.isBlockDevice())),
    },
    ["."],
  );
  for await (const c of stream as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}
