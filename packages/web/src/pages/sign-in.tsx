import { useEffect, useState } from "preact/hooks";
import { api } from "../api.js";
import { ErrorNote } from "../components.js";

/**
 * Sign-in with an API token. A link may carry the token in its fragment (`#token=…`, which the
 * browser never sends to a server): the page wipes it from the address bar and puts it in the
 * field, and the user signs in. Never by itself: a link from someone else would sign this
 * browser in to their account, and what the user then made would be theirs.
 */
export function SignInPage(props: { onSignedIn: () => void; sessionEnded?: boolean }) {
  const [token, setToken] = useState("");
  const [fromLink, setFromLink] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error | null>(null);

  const signIn = async (value: string) => {
    setBusy(true);
    setError(null);
    try {
      await api.signIn(value.trim());
      props.onSignedIn();
    } catch (err) {
      setError(err instanceof Error ? err : new Error(String(err)));
    } finally {
      setBusy(false);
    }
  };

  useEffect(() => {
    document.title = "Sign in · Drover";
    const linked = new URLSearchParams(location.hash.slice(1)).get("token");
    if (linked) {
      history.replaceState(null, "", location.pathname + location.search);
      setToken(linked);
      setFromLink(true);
    }
  }, []);

  return (
    <main id="main" class="sign-in">
      <h1>Sign in to Drover</h1>
      {props.sessionEnded ? (
        <p role="status">
          Your session has ended: signed out in another tab, or its token was revoked or expired. Sign in again.
        </p>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void signIn(token);
        }}
      >
        <label for="token">API token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="off"
          required
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
          aria-describedby="token-help"
        />
        <p id="token-help" class="muted">
          A user API token (<code>drv_u_…</code>): the admin token of <code>npm start</code>, or one made with{" "}
          <code>drover user-token create</code>.
        </p>
        {fromLink && (
          <p role="note">
            The link you followed filled in this token. Sign in with it only if you opened this link yourself (as{" "}
            <code>npm start</code> prints it): with someone else's token, what you do here is done in their name.
          </p>
        )}
        <ErrorNote error={error} />
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
