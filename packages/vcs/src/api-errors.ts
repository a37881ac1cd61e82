import { DroverError, messageOf, type VcsProvider } from "@drover/protocol";
import { redact } from "./git.js";

/*
 * What a failed VCS API call becomes: a DroverError naming the provider, the operation and the
 * provider's answer, with every secret of the connection removed (client libraries put request
 * details in their errors). `details.vcsStatus` carries the provider's HTTP status, so callers
 * can tell a refusal (401, 403, 404) from an outage.
 */

const providerName: Record<VcsProvider, string> = { github: "GitHub", gitlab: "GitLab" };

export function vcsApiError(input: {
  provider: VcsProvider;
  operation: string;
  status: number | undefined;
  reason: string;
  secrets: readonly string[];
  timedOut?: boolean;
}): DroverError {
  const who = providerName[input.provider];
  const answer = input.timedOut
    ? "no answer within the deadline"
    : input.status === undefined
      ? redact(input.reason, input.secrets)
      : `${input.status} ${redact(input.reason, input.secrets)}`.trim();
  const hint =
    input.status === 401
      ? `${who} refused the connection's credentials: check the token (or the GitHub App's key and installation).`
      : input.status === 403 || input.status === 404
        ? `Check that the repository exists and that the connection's credentials may use it for this.`
        : undefined;
  return new DroverError("vcs_error", `${who} API call ${input.operation} failed: ${answer}`.slice(0, 2000), {
    details: input.status === undefined ? {} : { vcsStatus: input.status },
    ...(hint === undefined ? {} : { hint }),
  });
}

/** The VCS's HTTP status carried by an error vcsApiError made (undefined for anything else). */
export function vcsStatusOf(err: unknown): number | undefined {
  if (!(err instanceof DroverError) || err.code !== "vcs_error") return undefined;
  const s = err.details?.["vcsStatus"];
  return typeof s === "number" ? s : undefined;
}

/**
 * Why a call failed: with an HTTP answer, the client's message; without one, the innermost cause,
 * since fetch says only "fetch failed" and Octokit "Request was cancelled." where undici names
 * the refused connection or the proxy's answer.
 */
export function failureReason(err: unknown, answered: boolean): string {
  let inner: unknown = err;
  if (!answered)
    for (let depth = 0; depth < 5 && inner instanceof Error && inner.cause instanceof Error; depth++)
      inner = inner.cause;
  return messageOf(inner);
}

/** Whether `err` is an abort or timeout of a fetch. */
export function isTimeout(err: unknown): boolean {
  const name = err instanceof Error ? err.name : "";
  return name === "TimeoutError" || name === "AbortError" || /timeout/i.test(messageOf(err).slice(0, 200));
}

/** A signal that aborts at the deadline or with `outer`, whichever comes first. */
export function deadlineSignal(deadlineMs: number, outer?: AbortSignal): AbortSignal {
  const timeout = AbortSignal.timeout(deadlineMs);
  return outer ? AbortSignal.any([timeout, outer]) : timeout;
}

/**
 * `work`'s value, or a rejection with `signal`'s reason once it aborts first: for a library call
 * that does not pass a signal on (the call itself is then bounded by its own request deadline).
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err as Error);
      },
    );
  });
}
