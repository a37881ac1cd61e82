import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { stripComments, braced } from "../providers/config-scan.js";

/*
 * Module sources as the module cache reads them: which calls a configuration makes, and which
 * of their sources the cache can fetch itself (registry, git, http archives, local directories).
 */

/** Where a module call's code comes from, as far as the cache understands it. */
export type ModuleSource =
  | { kind: "registry"; host: string; path: string; constraint: string | undefined }
  /** `git::<url>[//subdir][?ref=…]`: cached by the commit the ref names. */
  | { kind: "git"; url: string; ref: string | undefined; subdir: string }
  /** An `http(s)://….tar.gz` archive (`?checksum=sha256:<hex>` verified when given): cached by URL. */
  | { kind: "http"; url: string; checksum: string | undefined; subdir: string }
  /** A directory of the calling module (`./…`, `../…`): its own calls are followed. */
  | { kind: "local"; path: string };

export interface ModuleCall {
  name: string;
  /** The source as written (what terraform records in modules.json). */
  source: string;
  spec: ModuleSource | undefined;
}

const defaultRegistry = "registry.terraform.io";

/** Splits go-getter's `//subdir` off a source (the query stays with the URL). */
function splitSubdir(src: string): { url: string; subdir: string } {
  const schemeEnd = src.indexOf("://");
  const at = src.indexOf("//", schemeEnd >= 0 ? schemeEnd + 3 : 0);
  if (at < 0) return { url: src, subdir: "" };
  let subdir = src.slice(at + 2);
  let url = src.slice(0, at);
  const q = subdir.indexOf("?");
  if (q >= 0) {
    url += subdir.slice(q);
    subdir = subdir.slice(0, q);
  }
  return { url, subdir: subdir.replace(/\/+$/, "") };
}

/** What the cache makes of a module source; undefined: left to terraform. */
export function parseModuleSource(source: string, constraint: string | undefined): ModuleSource | undefined {
  if (source.startsWith("./") || source.startsWith("../")) return { kind: "local", path: source };
  const part = /^[0-9A-Za-z][0-9A-Za-z_-]*$/;
  const parts = source.split("/");
  if (!source.includes(":") && !source.startsWith("/")) {
    if (parts.length === 3 && parts.every((p) => part.test(p)))
      return { kind: "registry", host: defaultRegistry, path: parts.join("/").toLowerCase(), constraint };
    if (
      parts.length === 4 &&
      /^[0-9a-z.-]*\.[0-9a-z.-]*$/i.test(parts[0] ?? "") &&
      parts.slice(1).every((p) => part.test(p))
    )
      return {
        kind: "registry",
        host: (parts[0] as string).toLowerCase(),
        path: parts.slice(1).join("/").toLowerCase(),
        constraint,
      };
  }
  if (
    parts.length === 4 &&
    /^[0-9a-z.-]*\.[0-9a-z.-]*:\d{1,5}$/i.test(parts[0] ?? "") &&
    parts.slice(1).every((p) => part.test(p))
  ) {
    return {
      kind: "registry",
      host: (parts[0] as string).toLowerCase(),
      path: parts.slice(1).join("/").toLowerCase(),
      constraint,
    };
  }
  const forced = /^([a-z0-9]+)::(.*)$/.exec(source);
  const { url: raw, subdir } = splitSubdir(forced ? (forced[2] as string) : source);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  if (subdir.split("/").some((p) => p === ".." || p === ".")) return undefined;
  if (forced?.[1] === "git" && ["https:", "http:", "file:"].includes(url.protocol)) {
    const ref = url.searchParams.get("ref") ?? undefined;
    url.searchParams.delete("ref");
    // Other go-getter options (depth, sshkey) change how terraform fetches: leave those calls to it.
    if ([...url.searchParams.keys()].length > 0) return undefined;
    return { kind: "git", url: url.href, ref, subdir };
  }
  if (!forced && ["https:", "http:"].includes(url.protocol) && /\.(tar\.gz|tgz)$/.test(url.pathname)) {
    const sum = url.searchParams.get("checksum") ?? undefined;
    if (sum !== undefined && !/^sha256:[0-9a-f]{64}$/.test(sum)) return undefined;
    url.searchParams.delete("checksum");
    if ([...url.searchParams.keys()].length > 0) return undefined;
    return { kind: "http", url: url.href, checksum: sum?.slice("sha256:".length), subdir };
  }
  return undefined;
}

/** The module calls of the module in `dir` (`module "x" { source = "…" version = "…" }`). */
export function scanModuleCalls(dir: string): ModuleCall[] {
  const calls: ModuleCall[] = [];
  for (const file of readdirSync(dir)) {
    if (!file.endsWith(".tf")) continue;
    const text = stripComments(readFileSync(join(dir, file), "utf8"));
    for (const m of text.matchAll(/\bmodule\s+"([A-Za-z][\w-]*)"\s*\{/g)) {
      const body = braced(text, (m.index ?? 0) + m[0].length - 1);
      const source = /\bsource\s*=\s*"([^"]*)"/.exec(body)?.[1];
      const constraint = /\bversion\s*=\s*"([^"]*)"/.exec(body)?.[1];
      if (!source) continue;
      calls.push({ name: m[1] as string, source, spec: parseModuleSource(source, constraint) });
    }
  }
  return calls;
}

/** A module source the cache cannot fetch (unreachable, unknown ref, unsupported package): terraform gets it. */
export class ModuleSourceUnavailable extends Error {}

/** What the module cache records beside an entry: where it came from, and the archive's sha256 when there was one. */
export interface ModuleMeta {
  source: string;
  sha256?: string;
  commit?: string;
}

/** terraform's normalized form of a remote source in modules.json: the package with `//subdir` before its query. */
export function packageSource(source: string): string {
  const forced = /^([a-z0-9]+::)(.*)$/.exec(source);
  const { url, subdir } = splitSubdir(forced ? (forced[2] as string) : source);
  const q = url.indexOf("?");
  const withSubdir = !subdir ? url : q < 0 ? `${url}//${subdir}` : `${url.slice(0, q)}//${subdir}${url.slice(q)}`;
  return `${forced?.[1] ?? ""}${withSubdir}`;
}
