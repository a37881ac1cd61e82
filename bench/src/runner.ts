import { AsyncLocalStorage } from "node:async_hooks";
import { failedRows, type ExpectedRow, type Figure } from "./report.js";

/** A bench: resolves to its figures or throws; the runner records a failure as a note. */
export type Bench = () => Promise<Figure[]>;

/** What a sequence of benches produced: every figure, a note per failure, and each bench's time. */
export interface BenchOutcome {
  figures: Figure[];
  notes: string[];
  /** Benches that threw, timed out or left a failure behind them, in run order: the run did not succeed. */
  failed: string[];
  /** Seconds each bench took (a failed or timed-out one included), in run order. */
  seconds: Array<{ name: string; seconds: number }>;
}

/** How `runBenches` runs the benches. */
export interface RunOptions {
  /** How long a bench may run before it is abandoned, in ms. */
  timeoutMs: number;
  log?: (line: string) => void;
  /**
   * Each bench's rows, values aside: a bench that fails reports them as not met (failedRows),
   * and one whose figures differ from them leaves a note, so the list is kept up to date.
   */
  expected?: Record<string, () => ExpectedRow[]>;
  /** Ends what an abandoned (timed-out) bench left running; returns how many processes it ended. */
  abandon?: () => number;
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Puts process.env back to `saved`: a bench's changes (BENCH_CPU_PROF…) end with it, even when it never finished. */
function restoreEnv(saved: Record<string, string | undefined>): void {
  for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
  for (const [key, value] of Object.entries(saved))
    if (value !== undefined && process.env[key] !== value) process.env[key] = value;
}

const key = (r: ExpectedRow) => `${r.bench} / ${r.metric}`;

/**
 * Runs `names` of `benches` one after another. A bench that throws, or has not finished after
 * `timeoutMs`, leaves a note and its expected rows as failed, what it left running is ended
 * (`abandon`), and the next one runs: one broken bench must not cost the whole report. A
 * promise a bench leaves rejected in the background (a child's late failure) is a note too,
 * blamed on the bench it came from, instead of Node ending the process.
 */
export async function runBenches(
  benches: Record<string, Bench>,
  names: string[],
  options: RunOptions,
): Promise<BenchOutcome> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const outcome: BenchOutcome = { figures: [], notes: [], failed: [], seconds: [] };
  const fail = (name: string) => {
    if (!outcome.failed.includes(name)) outcome.failed.push(name);
  };
  // Which bench a promise belongs to: Node runs the unhandledRejection handler in the rejected
  // promise's async context, so a late failure of an abandoned bench is not blamed on the next.
  const running = new AsyncLocalStorage<string>();
  let current = "";
  const stray = (err: unknown) => {
    const source = running.getStore() ?? current;
    fail(source);
    outcome.notes.push(
      `${source}: a failure outside the bench's own flow${source === current ? "" : ` (after it was abandoned, while ${current} ran)`}: ${message(err)}`,
    );
  };
  process.on("unhandledRejection", stray);
  try {
    for (const name of names) {
      const bench = benches[name];
      if (!bench) throw new Error(`unknown bench ${name}; known: ${Object.keys(benches).join(", ")}`);
      current = name;
      const started = Date.now();
      const env = { ...process.env };
      log(`bench ${name}…`);
      let timer: NodeJS.Timeout | undefined;
      let abandoned = false;
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          abandoned = true;
          reject(
            new Error(`did not finish within ${(options.timeoutMs / 60_000).toFixed(1)} min (BENCH_TIMEOUT_MINUTES)`),
          );
        }, options.timeoutMs);
      });
      try {
        const figures = await Promise.race([running.run(name, bench), timedOut]);
        outcome.figures.push(...figures);
        const expected = options.expected?.[name]?.();
        if (expected) {
          const got = new Set(figures.map(key));
          const listed = new Set(expected.map(key));
          const missing = [...listed].filter((k) => !got.has(k));
          const unlisted = [...got].filter((k) => !listed.has(k));
          if (missing.length + unlisted.length > 0) {
            outcome.notes.push(
              `${name}: its expected rows (shown when it fails) differ from its figures; update them: ${[...missing.map((k) => `expected but not reported: ${k}`), ...unlisted.map((k) => `reported but not expected: ${k}`)].join("; ")}`,
            );
          }
        }
      } catch (err) {
        let failure = message(err);
        if (abandoned && options.abandon) failure += `; ${options.abandon()} process(es) it left running were ended`;
        fail(name);
        outcome.notes.push(`${name} failed: ${failure}`);
        outcome.figures.push(...failedRows(options.expected?.[name]?.() ?? [], `${name} failed: ${failure}`));
      } finally {
        clearTimeout(timer);
        restoreEnv(env);
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
