import Database from "better-sqlite3";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";
import pg from "pg";
import { chromium, type Page } from "playwright-core";
import { routes } from "@drover/protocol";
import { packDir, runToCompletion, startAgentProc } from "./agent-runs.js";
import { adminToken, api, repoRoot, startServerProc, type ServerProc } from "./harness.js";
import { percentile, type Figure } from "./report.js";
import { runs, webRows, workspaces } from "./web-rows.js";

/*
 * The web UI's figures: what the browser downloads, how soon a run page with a 200,000-line log
 * answers the keyboard, and how fast the server answers the UI's list pages over a database of
 * 10,000 workspaces and 1,000,000 runs, on SQLite and on PostgreSQL.
 */

const samples = 200;

/** Runs every figure of the web UI. */
export async function benchWeb(): Promise<Figure[]> {
  const rows = webRows();
  const figure = (i: number, value: number, note?: string): Figure => {
    const row = rows[i]!;
    const bound = Number(/[\d.]+/.exec(row.target)?.[0]);
    return { ...row, value, baseline: null, baselineLabel: "", met: value <= bound, ...(note ? { note } : {}) };
  };
  const figures = [figure(0, shippedKb())];
  figures.push(figure(1, ...(await logPageMs())));
  const sqlite = await listTimes("sqlite");
  figures.push(figure(2, sqlite[0]), figure(3, sqlite[1]), figure(4, sqlite[2]));
  const postgres = await listTimes("postgres");
  figures.push(figure(5, postgres[0]), figure(6, postgres[1]), figure(7, postgres[2]));
  return figures;
}

/** The gzipped size of the built UI's scripts, as the server sends them. */
function shippedKb(): number {
  const dir = join(repoRoot, "packages", "web", "dist", "assets");
  const bytes = readdirSync(dir)
    .filter((f) => f.endsWith(".js"))
    .reduce((sum, f) => sum + gzipSync(readFileSync(join(dir, f))).length, 0);
  return bytes / 1024;
}

/** A real run printing 200,000 lines; then the time from opening its page to its last line on screen after End. */
async function logPageMs(): Promise<[number, string]> {
  const server = await startServerProc();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-web-"));
  const browser = await chromium.launch({
    executablePath: process.env.DROVER_TEST_CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
  });
  try {
    await api(server.url, routes.createPool, { body: { name: "web" } });
    await api(server.url, routes.createWorkspace, { body: { name: "long-log", pool: "web" } });
    const agent = await startAgentProc(server, "web", "web-agent");
    writeFileSync(
      join(dir, "main.tf"),
      'resource "terraform_data" "many" {\n  provisioner "local-exec" {\n    command = "seq 1 200000"\n  }\n}\n',
    );
    const run = await runToCompletion(server, "long-log", await packDir(dir));
    await agent.stop();
    const page = await (await browser.newContext()).newPage();
    await signIn(page, server);
    const times: number[] = [];
    for (let i = 0; i < 3; i++) {
      const start = Date.now();
      await page.goto(`${server.url}/app/workspaces/long-log/runs/${run.id}`);
      const log = page.getByRole("log", { name: /apply log/ });
      await log.getByText(/Apply complete!/).waitFor({ timeout: 60_000 });
      await log.focus();
      await page.keyboard.press("End");
      await log.getByText(/\): 200000$/).waitFor({ timeout: 60_000 });
      times.push(Date.now() - start);
    }
    return [percentile(times, 50), `each: ${times.join(", ")} ms (the log read in 4 MiB requests, parsed, then End)`];
  } finally {
    await browser.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function signIn(page: Page, server: ServerProc): Promise<void> {
  await page.goto(`${server.url}/app`);
  await page.getByLabel("API token").fill(adminToken);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation", { name: "Main" }).waitFor();
}

/** Seeds the database behind `server` with the workspaces and runs, in SQL (the API would take hours). */
async function seed(database: "sqlite" | "postgres", location: string, poolId: string): Promise<void> {
  const t = Date.now() - runs * 1000;
  if (database === "sqlite") {
    const db = new Database(location);
    db.pragma("busy_timeout = 30000");
    db.exec(`
      INSERT INTO workspaces (id, name, pool_id, engine, engine_version, working_directory, runner_image, auto_apply, current_run_id, created_at)
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${workspaces - 1})
      SELECT printf('ws-bench%06d', i), printf('bench-%05d', i), '${poolId}', 'terraform', NULL, '', NULL, 0, NULL, ${t} + i FROM n;
      INSERT INTO runs (id, workspace_id, configuration_version_id, status, plan_only, is_destroy, auto_apply, message, cancel_requested, created_at, updated_at)
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${runs - 1})
      SELECT printf('run-bench%07d', i), printf('ws-bench%06d', i % ${workspaces}), 'cv-bench',
        CASE i % 4 WHEN 0 THEN 'applied' WHEN 1 THEN 'planned_and_finished' WHEN 2 THEN 'errored' ELSE 'discarded' END,
        0, 0, 0, '', 0, ${t} + i * 1000, ${t} + i * 1000 FROM n;
      ANALYZE;`);
    db.close();
    return;
  }
  const client = new pg.Client({ connectionString: location });
  await client.connect();
  try {
    await client.query(`
      INSERT INTO workspaces (id, name, pool_id, engine, engine_version, working_directory, runner_image, auto_apply, current_run_id, created_at)
      SELECT 'ws-bench' || lpad(i::text, 6, '0'), 'bench-' || lpad(i::text, 5, '0'), '${poolId}', 'terraform', NULL, '', NULL, 0, NULL, ${t} + i
      FROM generate_series(0, ${workspaces - 1}) AS g(i)`);
    await client.query(`
      INSERT INTO runs (id, workspace_id, configuration_version_id, status, plan_only, is_destroy, auto_apply, message, cancel_requested, created_at, updated_at)
      SELECT 'run-bench' || lpad(i::text, 7, '0'), 'ws-bench' || lpad((i % ${workspaces})::text, 6, '0'), 'cv-bench',
        (ARRAY['applied', 'planned_and_finished', 'errored', 'discarded'])[i % 4 + 1], 0, 0, 0, '', 0, ${t} + i::bigint * 1000, ${t} + i::bigint * 1000
      FROM generate_series(0, ${runs - 1}) AS g(i)`);
    await client.query("ANALYZE");
  } finally {
    await client.end();
  }
}

/** p99 in ms of the three list pages the UI reads, `samples` requests each, over the seeded database. */
async function listTimes(database: "sqlite" | "postgres"): Promise<[number, number, number]> {
  let pgServer: { url: string; stop(): void } | undefined;
  const env: Record<string, string> = {};
  if (database === "postgres") {
    const mod = (await import(pathToFileURL(join(repoRoot, "scripts", "postgres.mjs")).href)) as {
      startPostgres(): Promise<{ url: string; stop(): void }>;
    };
    pgServer = await mod.startPostgres();
    env.DROVER_DATABASE_URL = pgServer.url;
  }
  const server = await startServerProc(env);
  try {
    const pool = await api(server.url, routes.createPool, { body: { name: "lists" } });
    await seed(database, pgServer?.url ?? join(server.dir, "drover.db"), pool.id);
    const timed = async (call: (i: number) => Promise<unknown>) => {
      const times: number[] = [];
      for (let i = 0; i < samples; i++) {
        const start = performance.now();
        await call(i);
        times.push(performance.now() - start);
      }
      return percentile(times, 99);
    };
    const name = (i: number) => `bench-${String((i * 7919) % workspaces).padStart(5, "0")}`;
    const page = await timed((i) =>
      api(server.url, routes.listWorkspaces, { query: { limit: 50, ...(i % 2 ? { after: name(i) } : {}) } }),
    );
    const search = await timed((i) =>
      api(server.url, routes.listWorkspaces, { query: { limit: 50, search: name(i).slice(0, 9 + (i % 3)) } }),
    );
    const runPage = await timed((i) => api(server.url, routes.listRuns, { query: { workspace: name(i), limit: 25 } }));
    return [page, search, runPage];
  } finally {
    await server.stop();
    pgServer?.stop();
  }
}
