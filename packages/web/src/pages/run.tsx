import type { Job, Run, RunSource } from "@drover/protocol";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, type PlanJson } from "../api.js";
import {
  ConfirmButton,
  ErrorNote,
  isNotFound,
  Link,
  Loading,
  NotFound,
  OutsideLink,
  PageTitle,
  Status,
  Time,
} from "../components.js";
import { useLive } from "../live.js";
import { LogBuffer } from "../log/log-buffer.js";
import { LogView } from "../log/log-view.js";
import { useResource } from "../resource.js";
import { paths } from "../router.js";

const terminal = new Set(["applied", "planned_and_finished", "errored", "canceled", "discarded"]);

/** One run: status and timeline, plan summary and resource changes, live logs, and its actions. */
export function RunPage(props: { workspace: string; id: string }) {
  const isThisRun = (event: string, data: string) => event === "run" && data === props.id;
  const run = useResource(() => api.run(props.id), [props.id], isThisRun);
  const jobs = useResource(() => api.runJobs(props.id), [props.id], isThisRun);
  const hasPlan = run.data?.planSummary != null;
  const plan = useResource(() => (hasPlan ? api.runPlan(props.id) : Promise.resolve(null)), [props.id, hasPlan]);
  const [phase, setPhase] = useState<"plan" | "apply" | null>(null);

  if (isNotFound(run.error)) return <NotFound>There is no run {props.id}.</NotFound>;
  if (run.error) return <ErrorNote error={run.error} />;
  if (run.data === undefined) return <Loading />;
  const r = run.data;
  // The workspace in the address is not trusted: a run of another workspace is not found there.
  if (props.workspace !== r.workspaceName && props.workspace !== r.workspaceId)
    return (
      <NotFound>
        Workspace <Link href={paths.workspace(props.workspace)}>{props.workspace}</Link> has no run {props.id}.
      </NotFound>
    );
  const shown = phase ?? (r.applyJobId ? "apply" : "plan");
  const startedAt = firstStart(jobs.data?.items);
  return (
    <>
      <PageTitle
        sub={
          <p>
            <Status value={r.status} /> in workspace{" "}
            <Link href={paths.workspace(r.workspaceName)}>{r.workspaceName}</Link>
          </p>
        }
      >
        {`Run ${r.id}`}
      </PageTitle>
      <RunActions run={r} onDone={run.reload} />
      <section aria-labelledby="run-about">
        <h2 id="run-about">About</h2>
        <dl class="facts">
          <dt>Created</dt>
          <dd>
            <Time at={r.createdAt} />
            {r.createdBy ? ` by “${r.createdBy}”` : ""} from configuration version{" "}
            <code>{r.configurationVersionId}</code>
          </dd>
          {startedAt ? (
            <>
              <dt>Started</dt>
              <dd>
                <Time at={startedAt} />
              </dd>
            </>
          ) : null}
          {r.source ? <SourceFacts source={r.source} /> : null}
          {r.message ? (
            <>
              <dt>Message</dt>
              <dd class="message">{r.message}</dd>
            </>
          ) : null}
          <dt>Kind</dt>
          <dd>
            {r.refreshOnly ? "refresh only" : r.isDestroy ? "destroy" : "apply"}
            {r.planOnly ? ", plan only" : ""}
            {r.savedPlan ? ", saved plan" : ""}
            {r.autoApply ? ", applies without confirmation" : ""}
          </dd>
          {r.targets.length > 0 ? (
            <>
              <dt>Targets</dt>
              <dd class="addresses">{r.targets.join(", ")}</dd>
            </>
          ) : null}
          {r.replaces.length > 0 ? (
            <>
              <dt>Replaces</dt>
              <dd class="addresses">{r.replaces.join(", ")}</dd>
            </>
          ) : null}
          {r.errorMessage ? (
            <>
              <dt>Error</dt>
              <dd class="error">{r.errorMessage}</dd>
            </>
          ) : null}
        </dl>
      </section>
      <Timeline run={r} jobs={jobs.data?.items} />
      <section aria-labelledby="run-plan">
        <h2 id="run-plan">Plan</h2>
        {r.planSummary ? (
          <p class="plan-summary">
            <span class="add">+{r.planSummary.add} to add</span>,{" "}
            <span class="change">~{r.planSummary.change} to change</span>,{" "}
            <span class="destroy">−{r.planSummary.destroy} to destroy</span>
          </p>
        ) : (
          <p class="muted">{terminal.has(r.status) ? "No plan: the run ended before planning." : "No plan yet."}</p>
        )}
        <ErrorNote error={plan.error} />
        {plan.data ? <ResourceChanges plan={plan.data} /> : null}
      </section>
      <section aria-labelledby="run-logs">
        <h2 id="run-logs">Logs</h2>
        <div class="tabs" role="group" aria-label="Log of phase">
          <button type="button" aria-pressed={shown === "plan"} onClick={() => setPhase("plan")}>
            Plan
          </button>
          <button
            type="button"
            aria-pressed={shown === "apply"}
            disabled={!r.applyJobId}
            onClick={() => setPhase("apply")}
          >
            Apply
          </button>
        </div>
        {shown === "plan" && r.planJobId ? (
          <PhaseLog key={r.planJobId} run={r} phase="plan" jobId={r.planJobId} />
        ) : null}
        {shown === "apply" && r.applyJobId ? (
          <PhaseLog key={r.applyJobId} run={r} phase="apply" jobId={r.applyJobId} />
        ) : null}
        {!(shown === "plan" ? r.planJobId : r.applyJobId) ? <p class="muted">This phase has not started.</p> : null}
      </section>
    </>
  );
}

/** A run from git: the commit (with its repository, branch and author) and the pull request it plans. */
function SourceFacts(props: { source: RunSource }) {
  const s = props.source;
  return (
    <>
      <dt>Commit</dt>
      <dd class="source">
        <code title={s.commitSha}>{s.commitSha.slice(0, 12)}</code> of {s.repository} on {s.branch}
        {s.author ? `, by ${s.author}` : ""}
      </dd>
      {s.pullRequest ? (
        <>
          <dt>Pull request</dt>
          <dd>
            <OutsideLink href={s.pullRequest.url}>#{s.pullRequest.number}</OutsideLink> (a speculative plan)
          </dd>
        </>
      ) : null}
    </>
  );
}

function RunActions(props: { run: Run; onDone: () => void }) {
  const r = props.run;
  if (terminal.has(r.status)) return null;
  const act = (call: () => Promise<unknown>) => async () => {
    await call();
    props.onDone();
  };
  return (
    <div class="actions run-actions" role="group" aria-label="Run actions">
      {r.status === "planned" ? (
        <>
          <ConfirmButton
            label="Confirm and apply"
            title="Apply this plan?"
            description={`Terraform applies the plan${
              r.planSummary ? ` (+${r.planSummary.add} ~${r.planSummary.change} −${r.planSummary.destroy})` : ""
            } to the workspace's infrastructure.`}
            confirmLabel="Apply"
            primary
            onConfirm={act(() => api.confirmRun(r.id))}
          />
          <ConfirmButton
            label="Discard"
            title="Discard this plan?"
            description="The run ends without applying; the next queued run of the workspace starts."
            confirmLabel="Discard plan"
            danger
            onConfirm={act(() => api.discardRun(r.id))}
          />
        </>
      ) : null}
      <ConfirmButton
        label="Cancel run"
        title="Cancel this run?"
        description="Terraform is interrupted and may finish what it is doing, then the run ends as canceled."
        confirmLabel="Cancel run"
        danger
        disabled={r.cancelRequested}
        onConfirm={act(() => api.cancelRun(r.id, false))}
      />
      {r.cancelRequested ? (
        <ConfirmButton
          label="Force cancel"
          title="Force-cancel this run?"
          description="The agent kills terraform at once. The state may be left locked or partly written."
          confirmLabel="Force cancel"
          danger
          onConfirm={act(() => api.cancelRun(r.id, true))}
        />
      ) : null}
    </div>
  );
}

function Timeline(props: { run: Run; jobs: Job[] | undefined }) {
  return (
    <section aria-labelledby="run-timeline">
      <h2 id="run-timeline">Timeline</h2>
      <ol class="timeline">
        <li>
          Created <Time at={props.run.createdAt} />
        </li>
        {(props.jobs ?? []).map((job) => (
          <li key={job.id}>
            {job.phase} job {job.attempt > 1 ? `(attempt ${job.attempt}) ` : ""}
            <Status value={job.status} />: queued <Time at={job.createdAt} />
            {job.startedAt ? (
              <>
                , started <Time at={job.startedAt} />
                {job.agentId ? ` on agent ${job.agentName ?? job.agentId}` : ""}
              </>
            ) : null}
            {job.finishedAt ? (
              <>
                , finished <Time at={job.finishedAt} />
              </>
            ) : null}
            {job.message ? <JobMessage message={job.message} runError={props.run.errorMessage} /> : null}
          </li>
        ))}
        <li>
          Now <Status value={props.run.status} /> (since <Time at={props.run.updatedAt} />)
        </li>
      </ol>
    </section>
  );
}

/** A job's message; the one that became the run's error is already shown, in full, under About. */
function JobMessage(props: { message: string; runError: string | null }) {
  if (props.message === props.runError)
    return <span class="muted"> — the run failed with this job's error, shown above under About</span>;
  return <span class="muted"> — {props.message}</span>;
}

/** When the run started: its first job's start (a run waits queued until an agent takes a job), if any has. */
function firstStart(jobs: Job[] | undefined): string | null {
  const starts = (jobs ?? []).flatMap((job) => (job.startedAt ? [job.startedAt] : []));
  return starts.reduce<string | null>(
    (first, at) => (first === null || Date.parse(at) < Date.parse(first) ? at : first),
    null,
  );
}

function actionOf(actions: string[]): string {
  if (actions.includes("delete") && actions.includes("create")) return "replace";
  return actions.join(", ") || "no-op";
}

/** Changes listed before the user asks for all: a long plan must not push the logs thousands of pixels down. */
const changesShownFirst = 20;

function ResourceChanges(props: { plan: PlanJson }) {
  const [all, setAll] = useState(false);
  const changes = (props.plan.resource_changes ?? [])
    .map((c) => ({ address: c.address, action: actionOf(c.change?.actions ?? []) }))
    .filter((c) => c.action !== "no-op" && c.action !== "read");
  if (changes.length === 0) return <p class="muted">No resource changes.</p>;
  const long = changes.length > changesShownFirst;
  const shown = long && !all ? changes.slice(0, changesShownFirst) : changes;
  return (
    <>
      <ChangesTable changes={shown} />
      {long ? (
        <p>
          {all ? null : (
            <span class="muted">
              The first {changesShownFirst} of {changes.length} changes.{" "}
            </span>
          )}
          {/* One button whose label changes, so keyboard focus stays on it either way. */}
          <button type="button" onClick={() => setAll(!all)}>
            {all ? `Show the first ${changesShownFirst} only` : `Show all ${changes.length} changes`}
          </button>
        </p>
      ) : null}
    </>
  );
}

function ChangesTable(props: { changes: { address: string; action: string }[] }) {
  return (
    <div class="table-wrap">
      <table>
        <caption class="visually-hidden">Resource changes</caption>
        <thead>
          <tr>
            <th scope="col">Action</th>
            <th scope="col">Resource</th>
          </tr>
        </thead>
        <tbody>
          {props.changes.map((c) => (
            <tr key={c.address}>
              <td>
                <span class={`action action-${c.action.replace(/[^a-z]/g, "")}`}>{c.action}</span>
              </td>
              <td>
                <code>{c.address}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A phase's log, read from where it stopped whenever the stream says the job's log grew. */
function PhaseLog(props: { run: Run; phase: "plan" | "apply"; jobId: string }) {
  const buffer = useRef(new LogBuffer());
  const reader = useRef({ offset: 0, running: false, again: false, decoder: new TextDecoder() });
  const [version, setVersion] = useState(0);
  const [complete, setComplete] = useState(false);
  const [error, setError] = useState<Error | null>(null);

  const pump = async () => {
    const s = reader.current;
    if (s.running) {
      s.again = true;
      return;
    }
    s.running = true;
    try {
      for (;;) {
        const chunk = await api.runLog(props.run.id, props.phase, s.offset);
        if (chunk.bytes.length > 0) buffer.current.append(s.decoder.decode(chunk.bytes, { stream: true }));
        s.offset = chunk.nextOffset;
        setVersion(buffer.current.version);
        setError(null);
        if (chunk.complete) {
          buffer.current.append(s.decoder.decode());
          setComplete(true);
          return;
        }
        if (chunk.bytes.length === 0 && !s.again) return;
        s.again = false;
      }
    } catch (err) {
      setError(err instanceof Error ? err : new Error(String(err)));
    } finally {
      s.running = false;
    }
  };
  useEffect(() => {
    void pump();
  }, []);
  useLive((event, data) => {
    if (complete) return;
    if ((event === "log" && data === props.jobId) || event === "resync") void pump();
  });
  return (
    <>
      <ErrorNote error={error} />
      <LogView buffer={buffer.current} version={version} name={`${props.run.id}-${props.phase}`} complete={complete} />
    </>
  );
}
