import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { after, before } from "node:test";
import { routes } from "@drover/protocol";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { startTestServer, type TestServer } from "./server.js";

/** Debian's chromium (`.ci/run` installs it); DROVER_TEST_CHROMIUM names another. */
export const chromiumPath = process.env.DROVER_TEST_CHROMIUM ?? "/usr/bin/chromium";

/**
 * A headless chromium that makes no connection of its own: without these flags it reaches for
 * Google's services at start, which this network refuses.
 */
export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    timeout: 60_000,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
    ],
  });
}

/**
 * A browser context that records what a test must never see: Content-Security-Policy violations
 * and uncaught page errors. `problems()` lists them.
 */
export async function watchedContext(
  browser: Browser,
  options: Parameters<Browser["newContext"]>[0] = {},
): Promise<{ context: BrowserContext; problems: () => string[] }> {
  const context = await browser.newContext(options);
  const seen: string[] = [];
  context.on("page", (page) => watchPage(page, seen));
  return { context, problems: () => [...seen] };
}

function watchPage(page: Page, seen: string[]): void {
  page.on("console", (msg) => {
    if (/Content Security Policy|Refused to (load|execute|apply)/i.test(msg.text())) seen.push(`csp: ${msg.text()}`);
  });
  page.on("pageerror", (err) => seen.push(`page error: ${err.message}`));
}

/**
 * A page of its own watched context (see watchedContext) with `timeoutMs` as its default wait,
 * signed in to `baseUrl` with `token` unless `token` is undefined.
 */
export async function watchedPage(
  browser: Browser,
  baseUrl: string,
  token: string | undefined,
  timeoutMs = 30_000,
): Promise<{ page: Page; problems: () => string[] }> {
  const watched = await watchedContext(browser);
  const page = await watched.context.newPage();
  page.setDefaultTimeout(timeoutMs);
  if (token !== undefined) await signIn(page, baseUrl, token);
  return { page, problems: watched.problems };
}

/** Signs the page in through the sign-in form, as a user does. */
export async function signIn(page: Page, baseUrl: string, token: string, path = "/app"): Promise<void> {
  await page.goto(`${baseUrl}${path}`);
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation", { name: "Main" }).waitFor();
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** The serious and critical accessibility violations axe-core finds on the page, as readable lines. */
export async function accessibilityViolations(page: Page): Promise<string[]> {
  // Evaluated through the DevTools protocol, which the page's CSP does not govern (a <script> would be refused).
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    // This runs in the page: its globals are the browser's.
    const page = globalThis as any;
    const result: { violations: any[] } = await page.axe.run(page.document);
    return result.violations.map((v) => ({
      id: v.id as string,
      impact: v.impact as string,
      help: v.help as string,
      targets: (v.nodes as { target: string[] }[]).map((n) => n.target.join(" ")).slice(0, 3),
    }));
  });
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.targets.join(", ")})`);
}

/** Where the tests save screenshots of the pages (DROVER_SCREENSHOT_DIR, else test/dist/screenshots). */
export function screenshotDir(): string {
  const dir = process.env.DROVER_SCREENSHOT_DIR ?? join(import.meta.dirname, "..", "screenshots");
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** What useSignedInPage hands a web test file. */
export interface SignedInPage {
  server: TestServer;
  page: Page;
  problems: () => string[];
}

/**
 * For a web test file: a test server with the pool `pool`, a browser and a page signed in as
 * the admin, made before its tests (handed to `ready`) and closed after them.
 */
export function useSignedInPage(ready: (ui: SignedInPage) => void, pool = "p"): void {
  let server: TestServer | undefined;
  let browser: Browser | undefined;
  before(async () => {
    server = await startTestServer();
    await server.api(routes.createPool, { body: { name: pool } });
    browser = await launchBrowser();
    ready({ server, ...(await watchedPage(browser, server.url, server.adminToken)) });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });
}
