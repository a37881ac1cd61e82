import { useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError, onSignedOut, UnreachableError } from "./api.js";
import { ErrorNote, later, Link, Loading } from "./components.js";
import { disconnectLive } from "./live.js";
import { HomePage } from "./pages/home.js";
import { PoolPage, PoolsPage } from "./pages/pools.js";
import { RunPage } from "./pages/run.js";
import { SignInPage } from "./pages/sign-in.js";
import { TokensPage } from "./pages/tokens.js";
import { WorkspacePage } from "./pages/workspace.js";
import { WorkspacesPage } from "./pages/workspaces.js";
import { parseRoute, paths, useLocation, type Route } from "./router.js";

type SessionState = "checking" | "signed-in" | "signed-out";

/** The wait before checking the session again after the server could not be reached; it doubles up to the last. */
const firstRetryMs = 1000;
const lastRetryMs = 15_000;

/** The whole UI: the sign-in gate, the navigation and the page of the current path. */
export function App() {
  const [session, setSession] = useState<SessionState>("checking");
  const [error, setError] = useState<Error | null>(null);
  // Set when the server refused this tab's session: the sign-in page then says why it is back.
  const [sessionEnded, setSessionEnded] = useState(false);
  const [unreachable, setUnreachable] = useState<{ error: Error; retryInMs: number } | null>(null);
  const [check, setCheck] = useState(0);
  const failures = useRef(0);
  const location = useLocation();
  const route = parseRoute(location.pathname);

  // The session is checked until the server answers: a server restarting, or a proxy that cannot
  // reach it yet, must not leave the tab on an error page for good.
  useEffect(() => {
    let retry: ReturnType<typeof setTimeout> | undefined;
    let current = true;
    api.session().then(
      () => {
        if (!current) return;
        // Already signed in: a sign-in link's token has nothing to do and must not stay in the address bar.
        const here = window.location;
        if (here.hash.includes("token=")) history.replaceState(null, "", here.pathname + here.search);
        failures.current = 0;
        setUnreachable(null);
        setSession("signed-in");
      },
      (err: unknown) => {
        if (!current) return;
        if (err instanceof ApiError && err.status === 401) {
          setUnreachable(null);
          setSession("signed-out");
          return;
        }
        const retryInMs = Math.min(firstRetryMs * 2 ** failures.current, lastRetryMs);
        failures.current++;
        setUnreachable({ error: err instanceof Error ? err : new Error(String(err)), retryInMs });
        retry = setTimeout(() => setCheck((n) => n + 1), retryInMs);
      },
    );
    return () => {
      current = false;
      clearTimeout(retry);
    };
  }, [check]);
  useEffect(
    () =>
      onSignedOut(() => {
        disconnectLive();
        setSessionEnded(true);
        setSession("signed-out");
      }),
    [],
  );

  if (error) return <ErrorNote error={error} />;
  if (session === "checking" && unreachable)
    return (
      <Unreachable error={unreachable.error} retryInMs={unreachable.retryInMs} onRetry={() => setCheck((n) => n + 1)} />
    );
  if (session === "checking") return <Loading />;
  if (session === "signed-out")
    return (
      <SignInPage
        sessionEnded={sessionEnded}
        onSignedIn={() => {
          setSessionEnded(false);
          setSession("signed-in");
        }}
      />
    );
  const signOut = async () => {
    // The page says signed out only once the server has ended the session.
    try {
      await api.signOut();
    } catch (err) {
      setError(
        new Error(
          `Signing out failed, so the session may still be open: ${err instanceof Error ? err.message : String(err)}`,
        ),
      );
      return;
    }
    disconnectLive();
    setSession("signed-out");
  };
  return (
    <>
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="top">
        <nav aria-label="Main">
          <Link href={paths.home()} class="brand">
            Drover
          </Link>
          <ul>
            <NavItem href={paths.workspaces()} route={route} sections={["workspaces", "workspace", "run"]}>
              Workspaces
            </NavItem>
            <NavItem href={paths.pools()} route={route} sections={["pools", "pool"]}>
              Pools
            </NavItem>
            <NavItem href={paths.tokens()} route={route} sections={["tokens"]}>
              API tokens
            </NavItem>
          </ul>
        </nav>
        <button type="button" onClick={later(signOut)}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <Page route={route} />
      </main>
    </>
  );
}

function NavItem(props: { href: string; route: Route; sections: Route["page"][]; children: string }) {
  const current = props.sections.includes(props.route.page);
  return (
    <li>
      <Link href={props.href} {...(current ? { "aria-current": "page" as const } : {})}>
        {props.children}
      </Link>
    </li>
  );
}

function Page(props: { route: Route }) {
  const r = props.route;
  switch (r.page) {
    case "home":
      return <HomePage />;
    case "workspaces":
      return <WorkspacesPage />;
    case "workspace":
      return <WorkspacePage name={r.name} tab={r.tab} />;
    case "run":
      return <RunPage workspace={r.workspace} id={r.id} />;
    case "pools":
      return <PoolsPage />;
    case "pool":
      return <PoolPage name={r.name} />;
    case "tokens":
      return <TokensPage />;
    case "not-found":
      return (
        <section>
          <h1>Not found</h1>
          <p>
            No page here. <Link href={paths.home()}>Go home</Link>.
          </p>
        </section>
      );
  }
}

/** The page while the session cannot be checked: why, when the next try is, and a way to try now. */
function Unreachable(props: { error: Error; retryInMs: number; onRetry: () => void }) {
  useEffect(() => {
    document.title = "Cannot reach the server · Drover";
  }, []);
  const why = props.error instanceof UnreachableError ? props.error.reason : props.error.message;
  return (
    <main id="main" class="sign-in">
      <h1>Cannot reach the Drover server</h1>
      <p role="status">
        Retrying in {Math.round(props.retryInMs / 1000)} s… (last try: {why})
      </p>
      <button type="button" class="primary" onClick={props.onRetry}>
        Retry now
      </button>
    </main>
  );
}
