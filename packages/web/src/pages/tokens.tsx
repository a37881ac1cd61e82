import { useState } from "preact/hooks";
import { api } from "../api.js";
import { ErrorNote, later, Loading, PageTitle, RevokeCell, ShownOnce, Time } from "../components.js";
import { useResource } from "../resource.js";

/** User API tokens: made here (shown once), listed, revoked. */
export function TokensPage() {
  const tokens = useResource(() => api.userTokens(), []);
  const session = useResource(() => api.session(), []);
  const [description, setDescription] = useState("");
  const [days, setDays] = useState("");
  const [created, setCreated] = useState<string | null>(null);
  const [error, setError] = useState<Error | null>(null);
  return (
    <>
      <PageTitle>API tokens</PageTitle>
      <p class="muted">
        API tokens sign in the CLI (<code>DROVER_TOKEN</code>), scripts and this page.
      </p>
      <ErrorNote error={tokens.error ?? error} />
      {created ? <ShownOnce label="New API token" secret={created} onDone={() => setCreated(null)} /> : null}
      {tokens.data === undefined ? (
        <Loading />
      ) : (
        <div class="table-wrap">
          <table>
            <caption class="visually-hidden">API tokens</caption>
            <thead>
              <tr>
                <th scope="col">Description</th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {tokens.data.items.map((t) => {
                const mine = session.data?.userTokenId === t.id;
                return (
                  <tr key={t.id}>
                    <td>
                      {t.description}
                      {t.bootstrap ? <span class="muted"> (DROVER_ADMIN_TOKEN)</span> : null}
                      {mine ? <span class="muted"> (this browser's sign-in)</span> : null}
                    </td>
                    <td>
                      <Time at={t.createdAt} />
                    </td>
                    <td>{t.expiresAt ? <Time at={t.expiresAt} /> : "never"}</td>
                    <td>
                      <RevokeCell
                        revokedAt={t.revokedAt}
                        title={`Revoke the API token “${t.description}”?`}
                        description={
                          mine
                            ? "This browser signed in with it: revoking it signs you out."
                            : "Everything that uses it is refused from now on."
                        }
                        onRevoke={async () => {
                          await api.revokeUserToken(t.id);
                          tokens.reload();
                        }}
                      />
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      <h2>Create an API token</h2>
      <form
        class="stacked-form"
        onSubmit={later(async (e) => {
          e.preventDefault();
          setError(null);
          try {
            const n = days.trim() === "" ? undefined : Number(days);
            const made = await api.createUserToken(description.trim(), n);
            setCreated(made.token);
            setDescription("");
            setDays("");
            tokens.reload();
          } catch (err) {
            setError(err instanceof Error ? err : new Error(String(err)));
          }
        })}
      >
        <label for="token-description">Description</label>
        <input
          id="token-description"
          required
          value={description}
          placeholder="who or what uses it"
          onInput={(e) => setDescription(e.currentTarget.value)}
        />
        <label for="token-days">Expires after (days)</label>
        <input
          id="token-days"
          type="number"
          min={1}
          max={3650}
          value={days}
          placeholder="never"
          onInput={(e) => setDays(e.currentTarget.value)}
        />
        <div class="actions">
          <button type="submit" class="primary">
            Create API token
          </button>
        </div>
      </form>
    </>
  );
}
