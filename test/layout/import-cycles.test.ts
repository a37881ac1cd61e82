import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

// No module of packages/ imports itself through others (issue 14): a cycle makes load order
// decide what a module sees at start, and usually means two concepts share one file's job.
// Read from the compiled output: `.js` files hold the imports that run, `.d.ts` files the
// type-only ones, and both count.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function compiledFiles(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) compiledFiles(path, out);
    else if (name.endsWith(".js") || name.endsWith(".d.ts")) out.push(path);
  }
  return out;
}

/** The module a compiled file belongs to: its path without `.js` / `.d.ts`. */
const moduleOf = (path: string) => path.replace(/\.d\.ts$|\.js$/, "");

/** Each module's relative imports (static `import … from`, `export … from`, bare `import "…"`). */
export function importGraph(files: string[]): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  const pattern =
    /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s*["'](\.{1,2}\/[^"']+)["']|(?:^|\n)\s*import\s*["'](\.{1,2}\/[^"']+)["']/g;
  for (const file of files) {
    const from = moduleOf(file);
    const edges = graph.get(from) ?? new Set<string>();
    graph.set(from, edges);
    for (const m of readFileSync(file, "utf8").matchAll(pattern)) {
      const spec = (m[1] ?? m[2]) as string;
      edges.add(moduleOf(resolve(dirname(file), spec)));
    }
  }
  return graph;
}

/** Every cycle's modules (strongly connected components of more than one module, or a self-import). */
export function cycles(graph: Map<string, Set<string>>): string[][] {
  let index = 0;
  const indices = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    indices.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indices.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, indices.get(w) as number));
    }
    if (low.get(v) === indices.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || graph.get(v)?.has(v)) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!indices.has(v)) visit(v);
  return found;
}

test("no import cycle among the compiled modules of packages/", () => {
  const packages = readdirSync(join(root, "packages")).filter((p) =>
    existsSync(join(root, "packages", p, "dist", "src")),
  );
  assert.ok(packages.length >= 4, `compiled packages found: ${packages.join(", ")}`);
  const files = packages.flatMap((p) => compiledFiles(join(root, "packages", p, "dist", "src")));
  const found = cycles(importGraph(files)).map((c) => c.map((m) => relative(root, m)).join(" ↔ "));
  assert.deepEqual(found, [], `import cycles:\n${found.join("\n")}`);
});

test("the check finds a cycle, a type-only one included", () => {
  const graph = new Map([
    ["a", new Set(["b"])],
    ["b", new Set(["c"])],
    ["c", new Set(["a"])],
    ["d", new Set(["a"])],
  ]);
  assert.deepEqual(cycles(graph), [["a", "b", "c"]]);
});
