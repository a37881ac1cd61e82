import "./log.css";
import type { ComponentChildren, JSX } from "preact";
import { useEffect, useId, useLayoutEffect, useRef, useState } from "preact/hooks";
import { parseAnsi, segmentLook, stripAnsi, type Segment } from "./ansi.js";
import type { LogBuffer } from "./log-buffer.js";

/*
 * A run's log, virtualised: rows have one fixed height, so only the rows on screen (plus an
 * overscan) are in the DOM, whatever the log's length. The spacer is rows × height pixels tall and
 * browsers cap an element's height (Firefox near 17.9 million pixels: some 890,000 lines here).
 * Log text reaches the DOM only as text nodes and styles only through style objects, which Preact
 * applies through the CSSOM: nothing here is HTML, and the page's strict CSP allows it.
 */

// The CSS reads the row height from --log-row-height, set from this constant, so they agree.
const ROW_HEIGHT = 20;
const OVERSCAN = 12;
// Until the container is measured (and where there is no layout at all) assume 40rem of rows.
const FALLBACK_VIEWPORT = 640;
const SEARCH_DELAY_MS = 250;
// Rows never wrap: a huge line shows its start, not a row millions of pixels wide (download has all).
const MAX_ROW_CHARS = 10_000;

interface SearchState {
  buffer: LogBuffer | null;
  generation: number;
  version: number;
  needle: string;
  matches: number[];
  scanned: number;
}

type Range = [start: number, end: number];

// Occurrences of needle in text, case-insensitively; none when lower-casing changes the length
// (a few letters, like "İ"), since the offsets would then point at the wrong characters.
function findRanges(text: string, needle: string): Range[] {
  const ranges: Range[] = [];
  if (needle === "") return ranges;
  const lower = text.toLowerCase();
  if (lower.length !== text.length) return ranges;
  for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, at + needle.length)) {
    ranges.push([at, at + needle.length]);
  }
  return ranges;
}

function renderSegments(segments: Segment[], ranges: Range[]): JSX.Element[] {
  let offset = 0;
  let r = 0;
  return segments.map((seg, k) => {
    const end = offset + seg.text.length;
    const parts: ComponentChildren[] = [];
    let pos = offset;
    while (pos < end) {
      const range = ranges[r];
      if (range === undefined || range[0] >= end) {
        parts.push(seg.text.slice(pos - offset));
        break;
      }
      if (range[0] > pos) {
        parts.push(seg.text.slice(pos - offset, range[0] - offset));
        pos = range[0];
      }
      const stop = Math.min(range[1], end);
      parts.push(<mark key={pos}>{seg.text.slice(pos - offset, stop - offset)}</mark>);
      pos = stop;
      if (stop === range[1]) r++;
    }
    offset = end;
    const look = segmentLook(seg);
    return (
      <span key={k} class={look.className} style={look.style}>
        {parts}
      </span>
    );
  });
}

function Row(props: { index: number; text: string; needle: string; current: boolean }) {
  const long = props.text.length > MAX_ROW_CHARS;
  const segments = parseAnsi(long ? props.text.slice(0, MAX_ROW_CHARS) : props.text);
  const ranges = findRanges(segments.map((s) => s.text).join(""), props.needle);
  return (
    <div
      class={props.current ? "log-row log-row-match" : "log-row"}
      data-line={props.index}
      style={{ top: `${props.index * ROW_HEIGHT}px` }}
    >
      <span class="log-gutter" aria-hidden="true">
        {props.index + 1}
      </span>
      <span class="log-text">
        {renderSegments(segments, ranges)}
        {long ? " …" : null}
      </span>
    </div>
  );
}

/** Shows a run's log: virtualised, coloured, searchable, following the tail, downloadable. */
export function LogView(props: { buffer: LogBuffer; version: number; name: string; complete: boolean }) {
  const { buffer, name, complete } = props;
  const count = buffer.lineCount;
  const scrollRef = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [measured, setMeasured] = useState(0);
  const [follow, setFollow] = useState(true);
  const [draft, setDraft] = useState("");
  const [query, setQuery] = useState("");
  // The current match belongs to one search state, so a new query or a cleared log drops it.
  const [cursor, setCursor] = useState<{ at: number; of: SearchState | null }>({ at: -1, of: null });
  const searchId = useId();
  const search = useRef<SearchState>({ buffer: null, generation: 0, version: 0, needle: "", matches: [], scanned: 0 });

  const viewport = measured > 0 ? measured : FALLBACK_VIEWPORT;
  const maxTop = Math.max(0, count * ROW_HEIGHT - viewport);
  const needle = query.toLowerCase();

  // The matches are brought up to date during render, and only for what changed: a new query
  // walks the lines once; a growing log rescans just its new lines (and the last old one, which
  // may have been a partial line that has grown since).
  const s = search.current;
  if (s.buffer !== buffer || s.generation !== buffer.generation || s.needle !== needle || count < s.scanned) {
    search.current = { buffer, generation: buffer.generation, version: -1, needle, matches: [], scanned: 0 };
  }
  const state = search.current;
  if (needle !== "" && state.version !== buffer.version) {
    const from = Math.max(0, state.scanned - 1);
    while ((state.matches[state.matches.length - 1] ?? -1) >= from) state.matches.pop();
    for (let i = from; i < count; i++) {
      if (stripAnsi(buffer.line(i)).toLowerCase().includes(needle)) state.matches.push(i);
    }
    state.scanned = count;
    state.version = buffer.version;
  }
  const matches = state.matches;
  const current = cursor.of === state ? cursor.at : -1;
  const currentLine = current >= 0 ? matches[current] : undefined;
  const setCurrent = (at: number): void => setCursor({ at, of: search.current });

  useLayoutEffect(() => {
    const el = scrollRef.current;
    if (el === null) return undefined;
    const measure = (): void => setMeasured(el.clientHeight);
    measure();
    if (typeof ResizeObserver === "undefined") return undefined;
    const observer = new ResizeObserver(measure);
    observer.observe(el);
    return () => observer.disconnect();
  }, []);

  // Runs in the same task as the render that grew the log, so no scroll event can see the
  // taller log before it is scrolled to the end (which would read as the user scrolling up).
  useLayoutEffect(() => {
    const el = scrollRef.current;
    if (!follow || el === null) return;
    // The browser clamps this to the true bottom even before the viewport has been measured.
    el.scrollTop = el.scrollHeight;
    setTop(maxTop);
  }, [follow, maxTop, props.version]);

  const reveal = (line: number): void => {
    setFollow(false);
    const y = line * ROW_HEIGHT;
    if (y >= top && y + ROW_HEIGHT <= top + viewport) return;
    const target = Math.min(Math.max(0, y - (viewport - ROW_HEIGHT) / 2), maxTop);
    if (scrollRef.current !== null) scrollRef.current.scrollTop = target;
    // Set from the target, not read back, so the rows render even where nothing scrolls (no layout).
    setTop(target);
  };

  const step = (delta: 1 | -1): void => {
    if (matches.length === 0) return;
    const next =
      current < 0 ? (delta > 0 ? 0 : matches.length - 1) : (current + delta + matches.length) % matches.length;
    setCurrent(next);
    reveal(matches[next] ?? 0);
  };

  // Searching on every keystroke would rescan a long log per letter: wait for a pause (or Enter).
  useEffect(() => {
    if (draft === query) return undefined;
    const timer = setTimeout(() => setQuery(draft), SEARCH_DELAY_MS);
    return () => clearTimeout(timer);
  }, [draft]);

  // A new query starts at the first match on or below the first visible line, like find-in-page.
  useEffect(() => {
    if (matches.length === 0) {
      setCurrent(-1);
      return;
    }
    const firstVisible = Math.floor(top / ROW_HEIGHT);
    const found = matches.findIndex((line) => line >= firstVisible);
    const k = found === -1 ? 0 : found;
    setCurrent(k);
    reveal(matches[k] ?? 0);
  }, [query]);

  const submit = (delta: 1 | -1): void => (draft !== query ? setQuery(draft) : step(delta));

  const onScroll = (): void => {
    const el = scrollRef.current;
    if (el === null) return;
    setTop(el.scrollTop);
    // At the bottom (within a row, for fractional zoom) the view follows; anywhere above, it stops.
    setFollow(el.scrollHeight - el.scrollTop - el.clientHeight < ROW_HEIGHT);
  };

  const download = (): void => {
    const url = URL.createObjectURL(new Blob([buffer.text()], { type: "text/plain;charset=utf-8" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = `${name}.log`;
    a.style.display = "none";
    document.body.append(a);
    a.click();
    a.remove();
    // Revoking at once can cancel the download in some browsers; a moment later is safe.
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  };

  const clampedTop = Math.min(top, maxTop);
  const first = Math.max(0, Math.floor(clampedTop / ROW_HEIGHT) - OVERSCAN);
  const last = Math.min(count, Math.ceil((clampedTop + viewport) / ROW_HEIGHT) + OVERSCAN);
  const rows: JSX.Element[] = [];
  for (let i = first; i < last; i++) {
    rows.push(<Row key={i} index={i} text={buffer.line(i)} needle={needle} current={i === currentLine} />);
  }

  let status = matches.length === 0 ? "No matches" : `${matches.length} match${matches.length === 1 ? "" : "es"}`;
  if (currentLine !== undefined) status = `${current + 1} of ${matches.length}`;
  if (needle === "") status = "";

  return (
    <section class="log-view">
      <div class="log-toolbar">
        <form
          class="log-search"
          role="search"
          onSubmit={(e) => {
            e.preventDefault();
            submit(1);
          }}
        >
          <label for={searchId}>Search log</label>
          <input
            id={searchId}
            type="search"
            value={draft}
            onInput={(e) => setDraft(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && e.shiftKey) {
                e.preventDefault();
                submit(-1);
              }
            }}
          />
          <button type="button" onClick={() => step(-1)} disabled={matches.length === 0}>
            Previous
          </button>
          <button type="button" onClick={() => step(1)} disabled={matches.length === 0}>
            Next
          </button>
          <span class="log-search-status" aria-live="polite">
            {status}
          </span>
        </form>
        <button type="button" aria-pressed={follow} onClick={() => setFollow(!follow)}>
          Follow
        </button>
        <button type="button" onClick={download}>
          Download
        </button>
      </div>
      {/* role="log" implies aria-live="polite"; rows that mount as the view scrolls are not new
          output, and a fast log would flood a screen reader, so live announcing is turned off. */}
      <div
        ref={scrollRef}
        class="log-scroll"
        role="log"
        aria-live="off"
        aria-label={`${name} log`}
        tabIndex={0}
        onScroll={onScroll}
        style={{ "--log-row-height": `${ROW_HEIGHT}px`, "--log-gutter-width": `${String(count).length}ch` }}
      >
        {count === 0 ? (
          <p class="log-empty">{complete ? "No output." : "No output yet."}</p>
        ) : (
          <div class="log-rows" style={{ height: `${count * ROW_HEIGHT}px` }}>
            {rows}
          </div>
        )}
      </div>
    </section>
  );
}
