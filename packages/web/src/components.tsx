import type { RunSource } from "@drover/protocol";
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api.js";
import { onLinkClick, paths } from "./router.js";

/*
 * Pieces every page uses. Values from the server are only ever placed as text children or
 * attribute values (Preact escapes both); nothing here builds HTML.
 */

/**
 * An event handler that runs an async action. Actions report their own errors on the page; one
 * that escapes anyway is logged, not lost as an unhandled rejection.
 */
export function later<E>(action: (event: E) => Promise<unknown>): (event: E) => void {
  return (event) => {
    action(event).catch((err: unknown) => console.error(err));
  };
}

/** An in-app link: navigates without reloading the page. */
export function Link(props: { href: string; children: ComponentChildren; class?: string; "aria-current"?: "page" }) {
  return (
    <a href={props.href} class={props.class} aria-current={props["aria-current"]} onClick={onLinkClick}>
      {props.children}
    </a>
  );
}

/** A link out of the app (a pull request on the VCS); an address that is not http(s) is shown as text. */
export function OutsideLink(props: { href: string; children: ComponentChildren }) {
  if (!/^https?:\/\//i.test(props.href)) return <span>{props.children}</span>;
  return (
    <a href={props.href} rel="noopener noreferrer">
      {props.children}
    </a>
  );
}

/** Where a run's configuration came from in git, briefly: its pull request, or its branch, and the commit. */
export function SourceBrief(props: { source: RunSource }) {
  const s = props.source;
  return (
    <span class="source">
      {s.pullRequest ? `pull request #${s.pullRequest.number}` : s.branch} at{" "}
      <code title={s.commitSha}>{s.commitSha.slice(0, 7)}</code>
    </span>
  );
}

/** A run, job or agent status as a coloured badge that reads as plain text too. */
export function Status(props: { value: string }) {
  return <span class={`status status-${props.value.replace(/[^a-z_]/g, "")}`}>{props.value.replace(/_/g, " ")}</span>;
}

const units: [Intl.RelativeTimeFormatUnit, number][] = [
  ["day", 86_400_000],
  ["hour", 3_600_000],
  ["minute", 60_000],
  ["second", 1000],
];
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

/** A time as "3 minutes ago", with the exact time in a <time> element. */
export function Time(props: { at: string | null | undefined }) {
  if (!props.at) return <span>—</span>;
  const ms = Date.parse(props.at) - Date.now();
  const [unit, size] = units.find(([, size]) => Math.abs(ms) >= size) ?? ["second", 1000];
  return (
    <time dateTime={props.at} title={new Date(props.at).toLocaleString()}>
      {relative.format(Math.round(ms / size), unit)}
    </time>
  );
}

/** An error of a load or an action, announced to screen readers. */
export function ErrorNote(props: { error: Error | undefined | null }) {
  if (!props.error) return null;
  return (
    <p class="error" role="alert">
      {props.error.message}
    </p>
  );
}

/** Shown while the first answer is awaited. */
export function Loading() {
  return (
    <p class="muted" role="status">
      Loading…
    </p>
  );
}

/**
 * A button whose action needs a second, explicit yes: it opens a modal dialog that says what
 * will happen. The dialog traps focus and Escape closes it (the browser's <dialog>).
 * `primary` marks the action the page is for. A `danger` opener is only outlined in red, so it
 * never outweighs a primary action beside it; the filled red is its dialog's last button.
 */
export function ConfirmButton(props: {
  label: string;
  title: string;
  description: string;
  confirmLabel: string;
  primary?: boolean;
  danger?: boolean;
  disabled?: boolean;
  onConfirm: () => Promise<unknown>;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  const opener = useRef<HTMLButtonElement>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error | null>(null);
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await props.onConfirm();
      dialog.current?.close();
    } catch (err) {
      setError(err instanceof Error ? err : new Error(String(err)));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button
        ref={opener}
        type="button"
        class={props.primary ? "primary" : props.danger ? "danger-outline" : undefined}
        disabled={props.disabled}
        onClick={() => {
          setError(null);
          dialog.current?.showModal();
        }}
      >
        {props.label}
      </button>
      {/* Closing (Escape, Go back, done) returns focus to the button that opened it. */}
      <dialog ref={dialog} aria-label={props.title} onClose={() => opener.current?.focus()}>
        <h2>{props.title}</h2>
        <p>{props.description}</p>
        <ErrorNote error={error} />
        <div class="actions">
          <button type="button" onClick={() => dialog.current?.close()} disabled={busy}>
            Go back
          </button>
          <button type="button" class={props.danger ? "danger" : "primary"} onClick={later(confirm)} disabled={busy}>
            {props.confirmLabel}
          </button>
        </div>
      </dialog>
    </>
  );
}

/** A token's state in a table: when it was revoked, or a button that revokes it after a confirmation. */
export function RevokeCell(props: {
  revokedAt: string | null;
  title: string;
  description: string;
  onRevoke: () => Promise<unknown>;
}) {
  if (props.revokedAt)
    return (
      <>
        revoked <Time at={props.revokedAt} />
      </>
    );
  return (
    <ConfirmButton
      label="Revoke"
      title={props.title}
      description={props.description}
      confirmLabel="Revoke token"
      danger
      onConfirm={props.onRevoke}
    />
  );
}

/** A secret shown once, right after it was made, with a button to copy it. */
export function ShownOnce(props: { label: string; secret: string; onDone: () => void }) {
  const field = useRef<HTMLInputElement>(null);
  const [copied, setCopied] = useState(false);
  useEffect(() => field.current?.select(), []);
  return (
    <div class="shown-once" role="region" aria-label={props.label}>
      <p>
        <strong>{props.label}</strong>: copy it now, it is not shown again.
      </p>
      <input ref={field} readOnly value={props.secret} aria-label={props.label} class="secret" />
      <div class="actions">
        <button
          type="button"
          onClick={() => {
            void navigator.clipboard?.writeText(props.secret).then(() => setCopied(true));
          }}
        >
          {copied ? "Copied" : "Copy"}
        </button>
        <button type="button" onClick={props.onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

/** A page's heading, which also names the document (the tab's title). */
export function PageTitle(props: { children: string; sub?: ComponentChildren }) {
  useEffect(() => {
    document.title = `${props.children} · Drover`;
  }, [props.children]);
  return (
    <header class="page-title">
      <h1>{props.children}</h1>
      {props.sub}
    </header>
  );
}

/** Whether a load failed because what the address names does not exist. */
export const isNotFound = (error: Error | null | undefined): boolean =>
  error instanceof ApiError && error.status === 404;

/**
 * The page for an address that names no workspace, run or pool: a heading to say so, what is
 * missing, and the way back (`back`, else the workspaces), instead of the frame of a page that
 * has nothing to show.
 */
export function NotFound(props: { children: ComponentChildren; back?: { href: string; label: string } }) {
  const back = props.back ?? { href: paths.workspaces(), label: "All workspaces" };
  return (
    <section>
      <PageTitle>Not found</PageTitle>
      <p>{props.children}</p>
      <p>
        <Link href={back.href}>{back.label}</Link>
      </p>
    </section>
  );
}
