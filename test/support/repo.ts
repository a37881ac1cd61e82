import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root (tests run compiled, from test/dist/support). */
export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The `sh` blocks that follow a `<!-- marker -->` line in a Markdown document, in order. */
export function markedBlocks(markdown: string, marker: string): string[] {
  const pattern = new RegExp(`<!-- ${marker} -->\\n\`\`\`sh\\n([\\s\\S]*?)\\n\`\`\``, "g");
  return [...markdown.matchAll(pattern)].map((m) => m[1]!);
}
