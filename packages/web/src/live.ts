import { useEffect, useRef } from "preact/hooks";
import { checkSignedIn } from "./api.js";

/*
 * One event stream per tab (GET /api/v1/events). Pages subscribe to it; each event names what
 * changed (a run, a job's log, the agents) and the page re-reads it. The browser reconnects a
 * dropped stream by itself; a refused one (the server restarting answers 503) is retried here, and
 * one refused for an ended session signs the page out.
 * After any gap the pages get a "resync" and re-read everything they show.
 *
 * A hidden tab gives its stream up and reconnects when shown (with a resync): the browser opens
 * at most six connections to one server over HTTP/1.1, and each stream holds one for good, so a
 * seventh open tab would wait for ever for its every request.
 */

/** An event of the stream: its name (run, log, agents, resync) and the id it carries. */
export type LiveListener = (event: string, data: string) => void;

const events = ["run", "log", "agents", "resync"];
const listeners = new Set<LiveListener>();
let source: EventSource | null = null;
let retry: ReturnType<typeof setTimeout> | undefined;
let retryMs = 1000;
let interrupted = false;

function emit(event: string, data: string): void {
  for (const listener of [...listeners]) listener(event, data);
}

function connect(): void {
  if (source !== null || listeners.size === 0) return;
  if (document.hidden) {
    // What the page read while hidden may change before it is shown: then it reads it again.
    interrupted = true;
    return;
  }
  const stream = new EventSource("/api/v1/events");
  source = stream;
  for (const name of events) stream.addEventListener(name, (e) => emit(name, (e as MessageEvent<string>).data));
  stream.onopen = () => {
    retryMs = 1000;
    if (interrupted) emit("resync", "");
    interrupted = false;
  };
  stream.onerror = () => {
    interrupted = true;
    if (stream.readyState !== EventSource.CLOSED) return;
    stream.close();
    source = null;
    // A stream refused because the session ended (401) would be retried for ever while the page
    // shows what it last read: the page signs out instead.
    void checkSignedIn();
    retry = setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 30_000);
  };
}

/** Closes the stream (on sign-out); the next subscriber opens a new one. */
export function disconnectLive(): void {
  clearTimeout(retry);
  source?.close();
  source = null;
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) {
    connect();
    return;
  }
  // What changes while hidden is read again on return.
  if (source !== null) interrupted = true;
  disconnectLive();
});

/** Calls `listener` with every event while the component is mounted. */
export function useLive(listener: LiveListener): void {
  const current = useRef(listener);
  current.current = listener;
  useEffect(() => {
    const relay: LiveListener = (event, data) => current.current(event, data);
    listeners.add(relay);
    connect();
    return () => {
      listeners.delete(relay);
    };
  }, []);
}
