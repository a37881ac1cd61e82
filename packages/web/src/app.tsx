import { useEffect, useState } from "preact/hooks";
import { api, ApiError, onSignedOut } from "./api.js";
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

/** The whole UI: the sign-in gate, the navigation and the page of the current path. */
export function App() {
  const [session, setSession] = useState<SessionState>("checking");
  const [error, setError] = useState<Error | null>(null);
  const location = useLocation();
  const route = parseRoute(location.pathname);

  useEffect(() => {
    api.session().then(
      () => {
        // Already signed in: a sign-in link's token has nothing to do and must not stay in the address bar.
        const here = window.location;
        if (here.hash.includes("token=")) history.replaceState(null, "", here.pathname + here.search);
        setSession("signed-in");
      },
      (err: unknown) => {
        if (err instanceof ApiError && err.status === 401) setSession("signed-out");
        else setError(err instanceof Error ? err : new Error(String(err)));
      },
    );
    return onSignedOut(() => {
      disconnectLive();
      setSession("signed-out");
    });
  }, []);

  if (error) return <ErrorNote error={error} />;
  if (session === "checking") return <Loading />;
  if (session === "signed-out") return <SignInPage onSignedIn={() => setSession("signed-in")} />;
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
