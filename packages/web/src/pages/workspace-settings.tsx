import type { Workspace } from "@drover/protocol";
import { useEffect, useState } from "preact/hooks";
import { api, ApiError } from "../api.js";
import { ErrorNote, later } from "../components.js";
import { useResource } from "../resource.js";

type Settings = Parameters<typeof api.updateWorkspace>[1];

/** The settings the form edits, as the workspace has them. */
function settingsOf(ws: Workspace): Required<Settings> {
  return {
    engine: ws.engine,
    engineVersion: ws.engineVersion,
    autoApply: ws.autoApply,
    allowDestroyAll: ws.allowDestroyAll,
    pool: ws.poolId,
    runnerImage: ws.runnerImage,
    workingDirectory: ws.workingDirectory,
    remoteStateConsumers: ws.remoteStateConsumers,
    globalRemoteState: ws.globalRemoteState,
  } as Required<Settings>;
}

/** The form's fields by the names the API gives the parts of a refused request. */
const fieldIds: Partial<Record<string, string>> = {
  engine: "set-engine",
  engineVersion: "set-version",
  pool: "set-pool",
  runnerImage: "set-image",
  workingDirectory: "set-dir",
  remoteStateConsumers: "set-consumers",
};

/** The server's problems by field id, or null when one concerns no field of the form (its message then says it). */
function issuesByField(err: unknown): Record<string, string> | null {
  if (!(err instanceof ApiError) || err.issues.length === 0) return null;
  const byField: Record<string, string> = {};
  for (const issue of err.issues) {
    const id = fieldIds[issue.path.split(".")[0] ?? ""];
    if (id === undefined) return null;
    byField[id] = byField[id] === undefined ? issue.message : `${byField[id]}; ${issue.message}`;
  }
  return byField;
}

/** A field's problem, beside it and read with it; `invalid(id)` marks the field. */
function FieldIssue(props: { id: string; issues: Record<string, string> }) {
  const message = props.issues[props.id];
  return message === undefined ? null : (
    <p id={`${props.id}-issue`} class="error field-issue">
      {message}
    </p>
  );
}

/**
 * A workspace's settings: engine and version, auto-apply and the destroy-all guard, pool, runner
 * image, working directory, and which workspaces' runs may read its state. Saving sends only what
 * was changed in the form, so a setting changed elsewhere since the form was shown is kept.
 */
export function SettingsTab(props: { ws: Workspace; onSaved: () => void }) {
  const ws = props.ws;
  const [shown, setShown] = useState(() => settingsOf(ws));
  const pools = useResource(() => api.pools(), []);
  const [engine, setEngine] = useState(ws.engine);
  const [version, setVersion] = useState(ws.engineVersion ?? "");
  const [autoApply, setAutoApply] = useState(ws.autoApply);
  const [allowDestroyAll, setAllowDestroyAll] = useState(ws.allowDestroyAll);
  const [pool, setPool] = useState(ws.poolId);
  const [image, setImage] = useState(ws.runnerImage ?? "");
  const [dir, setDir] = useState(ws.workingDirectory);
  const [consumers, setConsumers] = useState(ws.remoteStateConsumers.join(", "));
  const [globalState, setGlobalState] = useState(ws.globalRemoteState);
  const [error, setError] = useState<Error | null>(null);
  const [issues, setIssues] = useState<Record<string, string>>({});
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState(false);
  // A refused save takes the focus to the first field at fault, whose problem is then read out.
  useEffect(() => {
    const first = Object.values(fieldIds).find((id) => id !== undefined && issues[id] !== undefined);
    if (first) document.getElementById(first)?.focus();
  }, [issues]);
  const invalid = (id: string) =>
    issues[id] === undefined ? {} : { "aria-invalid": true, "aria-describedby": `${id}-issue` };
  return (
    <form
      class="stacked-form"
      aria-label="Workspace settings"
      onSubmit={later(async (e) => {
        e.preventDefault();
        setBusy(true);
        setError(null);
        setIssues({});
        setSaved(false);
        try {
          const form: Required<Settings> = {
            engine,
            engineVersion: version.trim() === "" ? null : version.trim(),
            autoApply,
            allowDestroyAll,
            pool,
            runnerImage: image.trim() === "" ? null : image.trim(),
            workingDirectory: dir.trim(),
            remoteStateConsumers: consumers
              .split(",")
              .map((c) => c.trim())
              .filter((c) => c !== ""),
            globalRemoteState: globalState,
          };
          const changed = Object.fromEntries(
            Object.entries(form).filter(
              ([key, value]) => JSON.stringify(value) !== JSON.stringify(shown[key as keyof Settings]),
            ),
          ) as Settings;
          if (Object.keys(changed).length > 0) await api.updateWorkspace(ws.id, changed);
          setShown(form);
          setSaved(true);
          props.onSaved();
        } catch (err) {
          const byField = issuesByField(err);
          if (byField) {
            setIssues(byField);
            setError(new Error("The settings were not saved: correct the fields marked below."));
          } else setError(err instanceof Error ? err : new Error(String(err)));
        } finally {
          setBusy(false);
        }
      })}
    >
      <ErrorNote error={error ?? pools.error} />
      <label for="set-engine">Engine</label>
      <select
        id="set-engine"
        {...invalid("set-engine")}
        value={engine}
        onChange={(e) => setEngine(e.currentTarget.value as Workspace["engine"])}
      >
        <option value="terraform">Terraform</option>
        <option value="tofu">OpenTofu</option>
      </select>
      <FieldIssue id="set-engine" issues={issues} />
      <label for="set-version">Engine version</label>
      <input
        id="set-version"
        {...invalid("set-version")}
        value={version}
        placeholder="the agent's own"
        onInput={(e) => setVersion(e.currentTarget.value)}
      />
      <FieldIssue id="set-version" issues={issues} />
      <label for="set-pool">Agent pool</label>
      <select id="set-pool" {...invalid("set-pool")} value={pool} onChange={(e) => setPool(e.currentTarget.value)}>
        {(pools.data?.items ?? [{ id: ws.poolId, name: ws.poolName }]).map((p) => (
          <option key={p.id} value={p.id}>
            {p.name}
          </option>
        ))}
      </select>
      <FieldIssue id="set-pool" issues={issues} />
      <label for="set-image">Runner image (docker driver)</label>
      <input
        id="set-image"
        {...invalid("set-image")}
        value={image}
        placeholder="the agent's own"
        onInput={(e) => setImage(e.currentTarget.value)}
      />
      <FieldIssue id="set-image" issues={issues} />
      <label for="set-dir">Working directory</label>
      <input
        id="set-dir"
        {...invalid("set-dir")}
        value={dir}
        placeholder="the configuration's root"
        onInput={(e) => setDir(e.currentTarget.value)}
      />
      <FieldIssue id="set-dir" issues={issues} />
      <label class="check">
        <input type="checkbox" checked={autoApply} onChange={(e) => setAutoApply(e.currentTarget.checked)} />
        Apply without confirmation (auto-apply)
      </label>
      <label class="check">
        <input
          type="checkbox"
          checked={allowDestroyAll}
          onChange={(e) => setAllowDestroyAll(e.currentTarget.checked)}
        />
        Auto-apply even a plan that destroys everything the workspace manages (unless the run says otherwise)
      </label>
      <label for="set-consumers">Workspaces whose runs may read this state (terraform_remote_state)</label>
      <input
        id="set-consumers"
        {...invalid("set-consumers")}
        value={consumers}
        placeholder="names, comma-separated"
        onInput={(e) => setConsumers(e.currentTarget.value)}
      />
      <FieldIssue id="set-consumers" issues={issues} />
      <label class="check">
        <input type="checkbox" checked={globalState} onChange={(e) => setGlobalState(e.currentTarget.checked)} />
        Every workspace's runs may read this state
      </label>
      {saved ? (
        <p role="status" class="ok">
          Saved.
        </p>
      ) : null}
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>
          Save settings
        </button>
      </div>
    </form>
  );
}
