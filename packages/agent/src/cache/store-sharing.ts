import { messageOf } from "@drover/protocol";
import { readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";

/*
 * How processes sharing one cache directory (Kubernetes task pods on one volume) stay out of each
 * other's way: a fill lock file per entry, whose owner keeps touching it, and a hold file per
 * entry and process, touched while held. A file untouched for `staleMs` belonged to a process
 * that is gone.
 */

/** A hold on one entry: it is not evicted until released. */
export interface Hold {
  release(): void;
}

/** What the holds and the fill locks of one store share. */
export interface SharingOptions {
  logger: Logger;
  /** What the store holds, for log lines ("provider", "module"). */
  kind: string;
  now: () => number;
  /** A fill lock or hold file untouched this long belongs to a process that is gone. */
  staleMs: number;
  /** How often a process waiting for another one's fill looks again. */
  pollMs: number;
  /** This process among those sharing the directory (see `holderName`). */
  holder: () => string;
}

/** An entry's key as a file name. */
export const digest = (key: string): string => createHash("sha256").update(key).digest("hex").slice(0, 40);

/** How often a live process touches its lock and hold files. */
const touchEvery = (staleMs: number): number => Math.max(1000, staleMs / 3);

/**
 * A name for this process among those sharing the directory. Drawn on first use: an idle agent
 * opens its caches but holds nothing, and the draw would load Node's crypto into it.
 */
export function holderName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

/** The holds of this process's runs, as counts in memory and as hold files for the other processes. */
export class HoldFiles {
  /** Per entry: how many runs of this process hold it. */
  private readonly users = new Map<string, number>();
  private refresher: NodeJS.Timeout | undefined;

  constructor(
    private readonly dir: string,
    private readonly options: SharingOptions,
  ) {}

  /** Whether a run of this process holds `key`. */
  has(key: string): boolean {
    return this.users.has(key);
  }

  hold(key: string): Hold {
    const n = this.users.get(key) ?? 0;
    this.users.set(key, n + 1);
    if (n === 0) this.write(key);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        const left = (this.users.get(key) ?? 1) - 1;
        if (left > 0) {
          this.users.set(key, left);
          return;
        }
        this.users.delete(key);
        rmSync(this.path(key), { force: true });
        if (this.users.size === 0) this.close();
      },
    };
  }

  private path(key: string): string {
    return join(this.dir, `${digest(key)}.${this.options.holder()}`);
  }

  private write(key: string): void {
    try {
      writeFileSync(this.path(key), key);
    } catch (err) {
      this.options.logger.warn(
        { entry: key, err: messageOf(err) },
        `${this.options.kind} cache: cannot record a hold; other processes sharing the cache may evict the entry`,
      );
    }
    // Holds of a live process stay fresh; a crashed one's go stale and stop protecting anything.
    this.refresher ??= setInterval(() => {
      const t = new Date(this.options.now());
      for (const k of this.users.keys()) {
        try {
          utimesSync(this.path(k), t, t);
        } catch {
          this.write(k);
        }
      }
    }, touchEvery(this.options.staleMs)).unref();
  }

  /** Keys other live processes hold (their hold files are fresh); stale ones are removed. */
  foreign(): Set<string> {
    const held = new Set<string>();
    const mine = new Set([...this.users.keys()].map((k) => `${digest(k)}.${this.options.holder()}`));
    for (const name of readdirSync(this.dir)) {
      if (mine.has(name)) continue;
      const p = join(this.dir, name);
      try {
        if (this.options.now() - statSync(p).mtimeMs > this.options.staleMs) rmSync(p, { force: true });
        else held.add(readFileSync(p, "utf8"));
      } catch {
        // Released meanwhile.
      }
    }
    return held;
  }

  /** Stops touching hold files (the process is ending, or holds nothing; its holds go stale). */
  close(): void {
    if (this.refresher) clearInterval(this.refresher);
    this.refresher = undefined;
  }
}

/** Runs `fn` holding the lock file `lock` among every process sharing the directory. */
export async function withFillLock<T>(
  lock: string,
  key: string,
  options: SharingOptions & { signal: AbortSignal },
  fn: () => Promise<T>,
): Promise<T> {
  const { signal, now, staleMs } = options;
  for (;;) {
    signal.throwIfAborted();
    try {
      writeFileSync(lock, `${options.holder()}\n${key}\n`, { flag: "wx" });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    let age: number;
    try {
      age = now() - statSync(lock).mtimeMs;
    } catch {
      continue;
    }
    if (age > staleMs) {
      // Its owner is gone. Should two processes break it at once, both fill; placing never
      // replaces a good entry, so the cost is one more download.
      options.logger.warn({ entry: key }, `${options.kind} cache: breaking a fill lock left by a process that is gone`);
      rmSync(lock, { force: true });
      continue;
    }
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, options.pollMs);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal.reason as Error);
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }
  const touch = setInterval(() => {
    try {
      const t = new Date(now());
      utimesSync(lock, t, t);
    } catch {
      // Broken by another process: it fills too, and placing keeps whichever is good.
    }
  }, touchEvery(staleMs)).unref();
  try {
    return await fn();
  } finally {
    clearInterval(touch);
    rmSync(lock, { force: true });
  }
}
