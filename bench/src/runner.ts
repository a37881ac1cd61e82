import { type Figure } from "./report.js";

/** A bench: resolves to its figures or throws; the runner records a failure as a note. */
export type Bench = () => Promise<Figure[]>;

/** What a sequence of benches produced: every figure, a note per failure, and each bench's time. */
export interface BenchOutcome {
  figures: Figure[];
  notes: string[];
  /** Seconds each bench took (a failed or timed-out one included), in run order. */
  seconds: Array<{ name: string; seconds: number }>;
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * Runs `names` of `benches` one after another. A bench that throws, or has not finished after
 * `timeoutMs`, leaves a note and the next one runs: one broken bench must not cost the whole
 * report. A promise a bench leaves rejected in the background (a child's late failure) is a
 * note too, instead of Node ending the process.
 */
export async function runBenches(benches: Record<string, Bench>, names: string[], options: { timeoutMs: number; log?: (line: string) => void }): Promise<BenchOutcome> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const outcome: BenchOutcome = { figures: [], notes: [], seconds: [] };
  let current = "";
  const stray = (err: unknown) => outcome.notes.push(`${current}: a failure outside the bench's own flow: ${message(err)}`);
  process.on("unhandledRejection", stray);
  try {
    for (const name of names) {
      const bench = benches[name];
      if (!bench) throw new Error(`unknown bench ${name}; known: ${Object.keys(benches).join(", ")}`);
      current = name;
      const started = Date.now();
      log(`bench ${name}…`);
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`did not finish within ${(options.timeoutMs / 60_000).toFixed(1)} min (BENCH_TIMEOUT_MINUTES); its processes may still be running, so the benches after it may be slower`)), options.timeoutMs);
      });
      try {
        outcome.figures.push(...(await Promise.race([bench(), timedOut])));
      } catch (err) {
        outcome.notes.push(`${name} failed: ${message(err)}`);
      } finally {
        clearTimeout(timer);
      }
      const seconds = (Date.now() - started) / 1000;
      outcome.seconds.push({ name, seconds });
      log(`bench ${name} took ${seconds.toFixed(1)} s`);
    }
  } finally {
    process.off("unhandledRejection", stray);
  }
  return outcome;
}

/** One note line: how long each bench took and the total, so the run's length is in its report. */
export function timingNote(seconds: BenchOutcome["seconds"]): string {
  const total = seconds.reduce((n, s) => n + s.seconds, 0);
  return `time per bench: ${seconds.map((s) => `${s.name} ${s.seconds.toFixed(0)} s`).join(", ")}; total ${(total / 60).toFixed(1)} min`;
}
