import type { Variable, VariableKind, Workspace } from "@drover/protocol";
import { useEffect, useRef, useState } from "preact/hooks";
import { api } from "../api.js";
import { ConfirmButton, ErrorNote, later, Loading, Time } from "../components.js";
import { useResource } from "../resource.js";

/**
 * A workspace's variables. A sensitive value is write-only: the API never returns it, so the
 * page can only replace it; its field starts empty and is a password field. An HCL value is an
 * expression (a list, map or object) terraform receives typed. A variable is its kind and key:
 * a terraform variable and an environment variable may share a key.
 */
export function VariablesTab(props: { ws: Workspace }) {
  const vars = useResource(() => api.variables(props.ws.id), [props.ws.id]);
  const [editing, setEditing] = useState<string | null>(null);
  if (vars.error) return <ErrorNote error={vars.error} />;
  if (vars.data === undefined) return <Loading />;
  const done = () => {
    setEditing(null);
    vars.reload();
  };
  return (
    <>
      {vars.data.items.length === 0 ? (
        <p class="muted">No variables.</p>
      ) : (
        <div class="table-wrap">
          <table>
            <caption class="visually-hidden">Variables of {props.ws.name}</caption>
            <thead>
              <tr>
                <th scope="col">Key</th>
                <th scope="col">Kind</th>
                <th scope="col">HCL</th>
                <th scope="col">Value</th>
                <th scope="col">Updated</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {vars.data.items.map((v) =>
                editing === identity(v) ? (
                  <tr key={identity(v)}>
                    <td colSpan={6}>
                      <VariableForm ws={props.ws} existing={v} onDone={done} onCancel={() => setEditing(null)} />
                    </td>
                  </tr>
                ) : (
                  <tr key={identity(v)}>
                    <td>
                      <code>{v.key}</code>
                    </td>
                    <td>{kindName(v.kind)}</td>
                    <td>{v.hcl ? "HCL" : <span class="muted">string</span>}</td>
                    <td class="value">
                      {v.sensitive ? <span class="muted">sensitive — write-only</span> : <code>{v.value}</code>}
                    </td>
                    <td>
                      <Time at={v.updatedAt} />
                    </td>
                    <td class="actions">
                      <button type="button" onClick={() => setEditing(identity(v))} aria-label={`Edit ${named(v)}`}>
                        Edit
                      </button>
                      <ConfirmButton
                        label="Delete"
                        title={`Delete ${named(v)}?`}
                        description="Runs that start after this no longer get it."
                        confirmLabel="Delete variable"
                        danger
                        onConfirm={async () => {
                          await api.deleteVariable(props.ws.id, v.key, v.kind);
                          vars.reload();
                        }}
                      />
                    </td>
                  </tr>
                ),
              )}
            </tbody>
          </table>
        </div>
      )}
      <h3>Add a variable</h3>
      <VariableForm ws={props.ws} onDone={done} />
    </>
  );
}

const identity = (v: Variable) => `${v.kind}:${v.key}`;
const kindName = (kind: VariableKind) => (kind === "env" ? "environment" : "terraform");

/** What is wrong with `key` as a variable of `kind`, in words; the browser's own is only "match the requested format". */
function keyProblem(kind: VariableKind, key: string): string {
  if (key === "") return "";
  if (kind === "env")
    return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key)
      ? ""
      : "An environment variable's name has only letters, digits and _, and does not start with a digit.";
  return /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)
    ? ""
    : "A terraform variable's name has only letters, digits, _ and -, and does not start with a digit or -.";
}
const named = (v: Variable) => `${kindName(v.kind)} variable ${v.key}`;

function VariableForm(props: { ws: Workspace; existing?: Variable; onDone: () => void; onCancel?: () => void }) {
  const old = props.existing;
  const [key, setKey] = useState(old?.key ?? "");
  const [value, setValue] = useState(old?.sensitive ? "" : (old?.value ?? ""));
  const [kind, setKind] = useState<VariableKind>(old?.kind ?? "terraform");
  const [sensitive, setSensitive] = useState(old?.sensitive ?? false);
  const [hcl, setHcl] = useState(old?.hcl ?? false);
  const [error, setError] = useState<Error | null>(null);
  const [busy, setBusy] = useState(false);
  const wasSensitive = old?.sensitive === true;
  const keyField = useRef<HTMLInputElement>(null);
  // The browser refuses to submit the form with this message, for the kind chosen now.
  useEffect(() => keyField.current?.setCustomValidity(keyProblem(kind, key)), [kind, key]);
  const id = (field: string) => `var-${old ? identity(old) : "new"}-${field}`;
  return (
    <form
      class="stacked-form"
      aria-label={old ? `Edit ${named(old)}` : "Add a variable"}
      onSubmit={later(async (e) => {
        e.preventDefault();
        setBusy(true);
        setError(null);
        try {
          // The API sets a variable whether or not it exists: adding one whose key is taken would
          // replace it unseen, so the form checks the workspace's variables as they are now.
          if (!old && (await api.variables(props.ws.id)).items.some((v) => v.kind === kind && v.key === key))
            throw new Error(`a ${kindName(kind)} variable ${key} already exists; edit it instead`);
          await api.setVariable(props.ws.id, key, { value, kind, sensitive, hcl: hcl && kind === "terraform" });
          if (!old) {
            setKey("");
            setValue("");
          }
          props.onDone();
        } catch (err) {
          setError(err instanceof Error ? err : new Error(String(err)));
        } finally {
          setBusy(false);
        }
      })}
    >
      {/* The key names the variable: another key is another variable, so an edit shows it as text
          rather than as a field that looks editable but is not. */}
      {old ? (
        <>
          <span>Key</span>
          <code class="fixed-key">{old.key}</code>
        </>
      ) : (
        <>
          <label for={id("key")}>Key</label>
          <input id={id("key")} ref={keyField} value={key} required onInput={(e) => setKey(e.currentTarget.value)} />
        </>
      )}
      <label for={id("value")}>Value</label>
      {/* The old value of a sensitive variable is write-only: the page cannot send it back, so an
          edit, sensitive or not, needs the value again; an empty field would replace the secret. */}
      {sensitive ? (
        <input
          id={id("value")}
          type="password"
          autoComplete="off"
          value={value}
          required={wasSensitive}
          aria-describedby={wasSensitive ? id("hint") : undefined}
          onInput={(e) => setValue(e.currentTarget.value)}
        />
      ) : (
        <textarea
          id={id("value")}
          rows={2}
          value={value}
          required={wasSensitive}
          aria-describedby={wasSensitive ? id("hint") : undefined}
          onInput={(e) => setValue(e.currentTarget.value)}
        />
      )}
      {wasSensitive ? (
        <p id={id("hint")} class="muted">
          {sensitive
            ? "Enter the value again or a new one: the old value is write-only and cannot be shown."
            : "No longer sensitive: enter its value, which will be shown. The old value is write-only and cannot be shown."}
        </p>
      ) : null}
      <label for={id("kind")}>Kind</label>
      {/* The kind is part of what the variable is: another kind is another variable, added below. */}
      <select
        id={id("kind")}
        value={kind}
        disabled={old !== undefined}
        onChange={(e) => setKind(e.currentTarget.value as VariableKind)}
      >
        <option value="terraform">terraform variable</option>
        <option value="env">environment variable</option>
      </select>
      <label class="check">
        <input type="checkbox" checked={sensitive} onChange={(e) => setSensitive(e.currentTarget.checked)} />
        Sensitive (write-only, masked in plans and outputs)
      </label>
      <label class="check">
        <input
          type="checkbox"
          checked={hcl && kind === "terraform"}
          disabled={kind !== "terraform"}
          onChange={(e) => setHcl(e.currentTarget.checked)}
        />
        HCL (one line: a list, map or object such as {'{a = "b"}'}; terraform variables only)
      </label>
      <ErrorNote error={error} />
      <div class="actions">
        {props.onCancel ? (
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
        ) : null}
        <button type="submit" class="primary" disabled={busy}>
          {old ? "Save" : "Add variable"}
        </button>
      </div>
    </form>
  );
}
