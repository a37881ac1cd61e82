import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository this CLI was built in: dist/src/ of packages/cli, four levels down. */
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

/** A path as one shell word. */
const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`);

/**
 * How the quickstart's printed commands call the CLI and name the example, so they run as written
 * in a terminal at `cwd`: `npx drover` and `examples/hello` from the repository's root (npx finds
 * its node_modules/.bin/drover), else this CLI's own file and the example's full path (from
 * elsewhere, `npx drover` would look for an unrelated package on the registry).
 */
export function quickstartCommands(cwd: string): { cli: string; example: string; where: string } {
  const example = join(repoRoot, "examples", "hello");
  if (resolve(cwd) === resolve(repoRoot) && existsSync(join(cwd, "node_modules", ".bin", "drover")))
    return { cli: "npx drover", example: "examples/hello", where: "from this directory" };
  const main = fileURLToPath(new URL("./main.js", import.meta.url));
  return { cli: `node ${shellWord(main)}`, example: shellWord(example), where: "from any directory" };
}
