import { execFile } from "node:child_process";

/**
 * Disk a job's directories take on the host, in bytes: `du -skx` over them. du walks with
 * directory handles and never follows a symlink nor leaves the file system, so a run that swaps
 * a directory for a link to `/` while it is measured cannot send the count elsewhere; it counts
 * allocated blocks, so sparse files count for what they hold. Rejects when du cannot run.
 */
export async function diskUsage(dirs: string[], signal: AbortSignal): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile("du", ["-s", "-k", "-x", ...dirs], { signal, maxBuffer: 64 * 1024 }, (err, stdout) => {
      // du exits 1 when a file vanished while it walked (a run deleting its temporaries): its sum
      // of what it saw is still the measure.
      if (err && !(stdout && (err as { code?: unknown }).code === 1)) return reject(err);
      let kib = 0;
      for (const line of stdout.split("\n")) {
        const m = /^(\d+)\s/.exec(line);
        if (m) kib += Number(m[1]);
      }
      resolve(kib * 1024);
    });
  });
}

/** Options of one job's disk watch. */
export interface DiskWatchOptions {
  /** The directories the run's container writes on the host. */
  dirs: string[];
  /** The bound in bytes (> 0). */
  limitBytes: number;
  /** Time between two measures (each starts after the previous one ended). */
  intervalMs: number;
  /** Called once, when a measure is above the bound. */
  onExceeded(usedBytes: number): void;
  /** Called when du fails; the watch goes on. */
  onError(err: unknown): void;
}

/**
 * Measures a job's directories until stopped and reports the first time they are above their
 * bound. A watchdog, not a quota: a run may overshoot by what it writes in one interval, which
 * is why the caller stops the container at once; the Docker Engine API offers no size limit
 * for bind mounts, and a volume the agent could not read would not do (decision 0045).
 */
export class DiskWatch {
  private readonly stopping = new AbortController();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: DiskWatchOptions) {
    this.schedule();
  }

  /** Measures now; true when above the bound (reported once through onExceeded). */
  async check(): Promise<boolean> {
    let used: number;
    try {
      used = await diskUsage(this.o.dirs, this.stopping.signal);
    } catch (err) {
      if (!this.stopping.signal.aborted) this.o.onError(err);
      return false;
    }
    if (used <= this.o.limitBytes || this.stopping.signal.aborted) return false;
    this.stop();
    this.o.onExceeded(used);
    return true;
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      void this.check().then((over) => {
        if (!over && !this.stopping.signal.aborted) this.schedule();
      });
    }, this.o.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.stopping.abort();
  }
}
