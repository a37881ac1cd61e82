import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { useLive } from "./live.js";

/** Data a page shows: loaded, re-read on the live events that concern it, and its last error. */
export interface Resource<T> {
  data: T | undefined;
  error: Error | undefined;
  reload(): void;
}

/**
 * Loads `load()` now and again whenever `deps` change or a live event passes `refreshOn`.
 * Reloads never overlap: events that come during one cause a single reload after it.
 */
export function useResource<T>(
  load: () => Promise<T>,
  deps: unknown[],
  refreshOn: (event: string, data: string) => boolean = (event) => event === "resync",
): Resource<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const state = useRef({ running: false, again: false, generation: 0 });
  const loader = useRef(load);
  loader.current = load;

  const reload = useCallback(() => {
    const s = state.current;
    if (s.running) {
      s.again = true;
      return;
    }
    s.running = true;
    const generation = s.generation;
    loader
      .current()
      .then(
        (value) => {
          if (generation !== s.generation) return;
          setData(value);
          setError(undefined);
        },
        (err: unknown) => {
          if (generation !== s.generation) return;
          setError(err instanceof Error ? err : new Error(String(err)));
        },
      )
      .finally(() => {
        s.running = false;
        if (s.again) {
          s.again = false;
          reload();
        }
      });
  }, []);

  useEffect(() => {
    // New inputs: answers to the old ones are dropped.
    state.current.generation++;
    state.current.running = false;
    state.current.again = false;
    setData(undefined);
    setError(undefined);
    reload();
  }, deps);

  useLive((event, id) => {
    if (event === "resync" || refreshOn(event, id)) reload();
  });
  return { data, error, reload };
}
