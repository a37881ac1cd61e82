import { existsSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";

/** What a kept directory was prepared for; an apply reuses it only when all of it matches. */
export interface PlanDirKey {
  runId: string;
  configurationVersionId: string;
  engine: string;
  engineVersion: string | null;
  workingDirectory: string;
}

interface Kept {
  key: PlanDirKey;
  dir: string;
  timer: NodeJS.Timeout;
}

const sameKey = (a: PlanDirKey, b: PlanDirKey) =>
  a.runId === b.runId &&
  a.configurationVersionId === b.configurationVersionId &&
  a.engine === b.engine &&
  a.engineVersion === b.engineVersion &&
  a.workingDirectory === b.workingDirectory;

/**
 * Initialized plan directories this agent keeps for the same run's apply: when the apply
 * lands here it skips downloading, extracting and `terraform init` again. At most `limit`
 * are kept, each for `ttlMs`; the apply still runs the plan file the server holds.
 */
export class KeptPlanDirs {
  private readonly kept: Kept[] = [];

  constructor(
    private readonly dataDir: string,
    private readonly limit: number,
    private readonly ttlMs: number,
  ) {}

  /** Moves a finished plan's directory aside for its apply; false when reuse is off. */
  keep(key: PlanDirKey, runDir: string): boolean {
    if (this.ttlMs <= 0 || this.limit <= 0 || !existsSync(runDir)) return false;
    this.drop(key.runId);
    const dir = join(this.dataDir, `kept-plan-${key.runId}`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(runDir, dir);
    const timer = setTimeout(() => this.drop(key.runId), this.ttlMs);
    timer.unref();
    this.kept.push({ key, dir, timer });
    while (this.kept.length > this.limit) this.remove(this.kept[0]!);
    return true;
  }

  /** Moves the kept directory of this run to `runDir` when it matches; true when it did. */
  take(key: PlanDirKey, runDir: string): boolean {
    const found = this.kept.find((k) => k.key.runId === key.runId);
    if (!found) return false;
    this.kept.splice(this.kept.indexOf(found), 1);
    clearTimeout(found.timer);
    if (!sameKey(found.key, key)) {
      rmSync(found.dir, { recursive: true, force: true });
      return false;
    }
    rmSync(runDir, { recursive: true, force: true });
    renameSync(found.dir, runDir);
    return true;
  }

  /** Runs whose directories are kept (at most `limit`). */
  runIds(): string[] {
    return this.kept.map((k) => k.key.runId);
  }

  /** Deletes the kept directory of a run that will not be applied here (discarded, canceled). */
  release(runId: string): void {
    this.drop(runId);
  }

  /** Deletes every kept directory (the agent is stopping). */
  clear(): void {
    for (const k of [...this.kept]) this.remove(k);
  }

  private drop(runId: string): void {
    const found = this.kept.find((k) => k.key.runId === runId);
    if (found) this.remove(found);
  }

  private remove(k: Kept): void {
    clearTimeout(k.timer);
    this.kept.splice(this.kept.indexOf(k), 1);
    rmSync(k.dir, { recursive: true, force: true });
  }
}
