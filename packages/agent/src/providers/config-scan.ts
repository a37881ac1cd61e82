import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ProviderAddress } from "./registry.js";

/*
 * What a configuration says about its providers, read without terraform: the root module's
 * `required_providers` and the dependency lock file. Whatever this misses is not an error:
 * terraform installs it itself (the run's CLI configuration keeps direct installation for
 * every provider the cache did not prepare).
 */

export const defaultRegistry = "registry.terraform.io";

/** Parses a provider source (`ns/type`, `host/ns/type`) into a lock-file address. */
export function parseSource(source: string): ProviderAddress | undefined {
  const parts = source.trim().toLowerCase().split("/");
  const ok = (s: string | undefined): s is string => s !== undefined && /^[0-9a-z][0-9a-z_-]*$/.test(s);
  if (parts.length === 2 && ok(parts[0]) && ok(parts[1]))
    return { host: defaultRegistry, namespace: parts[0], type: parts[1] };
  if (parts.length === 3 && /^[0-9a-z.-]+(:\d{1,5})?$/.test(parts[0] ?? "") && ok(parts[1]) && ok(parts[2]))
    return { host: parts[0] as string, namespace: parts[1], type: parts[2] };
  return undefined;
}

/** HCL text without comments; strings kept (a `#` inside one is not a comment). */
export function stripComments(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
      out += text.slice(start, i + 1);
    } else if (c === "#" || (c === "/" && text[i + 1] === "/")) {
      while (i < text.length && text[i] !== "\n") i++;
      out += "\n";
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 1;
      out += " ";
    } else out += c;
  }
  return out;
}

/** The text between the brace at `open` and its match. */
export function braced(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
    } else if (c === "{") depth++;
    else if (c === "}" && --depth === 0) return text.slice(open + 1, i);
  }
  return text.slice(open + 1);
}

/** A provider the configuration asks for, with its version constraints (empty: any). */
export interface Requirement {
  address: ProviderAddress;
  constraints: string[];
}

/** The root module's `required_providers` entries, by lock-file address. */
export function scanRequirements(workDir: string): Map<string, Requirement> {
  const found = new Map<string, Requirement>();
  const add = (address: ProviderAddress, constraint: string | undefined): void => {
    const key = `${address.host}/${address.namespace}/${address.type}`;
    const r = found.get(key) ?? { address, constraints: [] };
    if (constraint) r.constraints.push(constraint);
    found.set(key, r);
  };
  for (const file of readdirSync(workDir)) {
    if (!file.endsWith(".tf")) continue;
    let text: string;
    try {
      text = stripComments(readFileSync(join(workDir, file), "utf8"));
    } catch {
      continue;
    }
    for (const m of text.matchAll(/\brequired_providers\s*\{/g)) {
      const body = braced(text, (m.index ?? 0) + m[0].length - 1);
      // name = { source = "…", version = "…" }   or the old form   name = "constraint"
      for (const e of body.matchAll(/([A-Za-z][\w-]*)\s*=\s*(\{[^{}]*\}|"[^"]*")/g)) {
        const localName = (e[1] as string).toLowerCase();
        const value = e[2] as string;
        if (value.startsWith('"')) {
          add({ host: defaultRegistry, namespace: "hashicorp", type: localName }, value.slice(1, -1));
          continue;
        }
        const source = /\bsource\s*=\s*"([^"]*)"/.exec(value)?.[1];
        const version = /\bversion\s*=\s*"([^"]*)"/.exec(value)?.[1];
        const address = source
          ? parseSource(source)
          : { host: defaultRegistry, namespace: "hashicorp", type: localName };
        if (address) add(address, version);
      }
    }
  }
  return found;
}

/** One provider of a dependency lock file. */
export interface LockedProvider {
  address: ProviderAddress;
  version: string;
  hashes: string[];
}

export const lockFileName = ".terraform.lock.hcl";

/** The providers `.terraform.lock.hcl` in `workDir` pins (empty when there is none). */
export function readLockFile(workDir: string): Map<string, LockedProvider> {
  const path = join(workDir, lockFileName);
  const out = new Map<string, LockedProvider>();
  if (!existsSync(path)) return out;
  const text = stripComments(readFileSync(path, "utf8"));
  for (const m of text.matchAll(/\bprovider\s+"([^"]+)"\s*\{/g)) {
    const address = parseSource(m[1] as string);
    const body = braced(text, (m.index ?? 0) + m[0].length - 1);
    const version = /\bversion\s*=\s*"([^"]+)"/.exec(body)?.[1];
    const list = /\bhashes\s*=\s*\[([^\]]*)\]/.exec(body)?.[1] ?? "";
    if (!address || !version) continue;
    out.set(`${address.host}/${address.namespace}/${address.type}`, {
      address,
      version,
      hashes: [...list.matchAll(/"([^"]+)"/g)].map((h) => h[1] as string),
    });
  }
  return out;
}

/**
 * The lock file text with `hash` added to the provider's hash list: terraform checks an
 * unpacked mirror entry by its `h1:` hash only, so a lock file that vouches for the package by
 * its archive hash (`zh:`) alone gets the `h1:` the agent verified, as terraform adds it after
 * checking an archive itself.
 */
export function addLockHash(text: string, address: string, hash: string): string {
  const at = text.search(new RegExp(`provider\\s+"${address.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"\\s*\\{`, "i"));
  if (at < 0) return text;
  const list = text.indexOf("hashes", at);
  const open = list < 0 ? -1 : text.indexOf("[", list);
  if (open < 0) return text;
  return `${text.slice(0, open + 1)}\n    "${hash}",${text.slice(open + 1)}`;
}
