import { useEffect, useState } from "preact/hooks";

/*
 * Deep links of the UI, all under /app (the server answers the page for every one of them).
 * Names in paths are URI-encoded, so any workspace or pool name round-trips.
 */

/** The workspace page's tabs, each its own path. */
export const workspaceTabs = ["runs", "variables", "outputs", "state", "settings"] as const;
export type WorkspaceTab = (typeof workspaceTabs)[number];

/** What a path shows. */
export type Route =
  | { page: "home" }
  | { page: "workspaces" }
  | { page: "workspace"; name: string; tab: WorkspaceTab }
  | { page: "run"; workspace: string; id: string }
  | { page: "pools" }
  | { page: "pool"; name: string }
  | { page: "tokens" }
  | { page: "not-found" };

const d = (s: string) => {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
};

/** The route of a path. */
export function parseRoute(pathname: string): Route {
  const parts = pathname.replace(/\/+$/, "").split("/").slice(1);
  if (parts[0] !== "app") return { page: "not-found" };
  const [section, name, sub, id] = parts.slice(1);
  if (section === undefined) return { page: "home" };
  if (section === "workspaces") {
    if (name === undefined) return { page: "workspaces" };
    if (sub === "runs" && id !== undefined && parts.length === 5) return { page: "run", workspace: d(name), id: d(id) };
    const tab = (sub ?? "runs") as WorkspaceTab;
    if (workspaceTabs.includes(tab) && parts.length <= 4) return { page: "workspace", name: d(name), tab };
  }
  if (section === "pools") {
    if (name === undefined) return { page: "pools" };
    if (parts.length === 3) return { page: "pool", name: d(name) };
  }
  if (section === "tokens" && parts.length === 2) return { page: "tokens" };
  // Where `terraform login` sends its user to make a token, as on the platforms it knows.
  if (section === "settings" && name === "tokens" && parts.length === 3) return { page: "tokens" };
  // The run links terraform's cloud block prints: /app/<organization>/<workspace>/runs/<run>.
  if (sub === "runs" && name !== undefined && id !== undefined && parts.length === 5)
    return { page: "run", workspace: d(name), id: d(id) };
  return { page: "not-found" };
}

const e = encodeURIComponent;

/** Links of the UI's pages. */
export const paths = {
  home: () => "/app",
  workspaces: () => "/app/workspaces",
  workspace: (name: string, tab: WorkspaceTab = "runs") =>
    tab === "runs" ? `/app/workspaces/${e(name)}` : `/app/workspaces/${e(name)}/${tab}`,
  run: (workspace: string, id: string) => `/app/workspaces/${e(workspace)}/runs/${e(id)}`,
  pools: () => "/app/pools",
  pool: (name: string) => `/app/pools/${e(name)}`,
  tokens: () => "/app/tokens",
};

const navigated = "drover:navigate";

/**
 * Shows another page without a reload, as a link does. A new page takes the focus to its main
 * region once drawn, as a page load would: the link or button that led there may be gone, and a
 * screen reader is told that the page changed.
 */
export function navigate(href: string, replace = false): void {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  window.dispatchEvent(new Event(navigated));
  if (!replace) requestAnimationFrame(() => document.getElementById("main")?.focus());
}

/** The current location, re-rendered on every navigation (links, back and forward). */
export function useLocation(): { pathname: string; search: URLSearchParams } {
  const read = () => ({ pathname: location.pathname, search: new URLSearchParams(location.search) });
  const [current, setCurrent] = useState(read);
  useEffect(() => {
    const update = () => setCurrent(read());
    window.addEventListener("popstate", update);
    window.addEventListener(navigated, update);
    return () => {
      window.removeEventListener("popstate", update);
      window.removeEventListener(navigated, update);
    };
  }, []);
  return current;
}

/** A click on an in-app link navigates without a reload, unless the user asked for a new tab or window. */
export function onLinkClick(event: MouseEvent): void {
  const anchor = (event.currentTarget as HTMLAnchorElement | null) ?? null;
  if (!anchor || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey || anchor.target === "_blank") return;
  if (anchor.origin !== location.origin || anchor.hasAttribute("download")) return;
  event.preventDefault();
  navigate(anchor.pathname + anchor.search);
}
