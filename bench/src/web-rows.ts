import type { ExpectedRow } from "./report.js";

/** Size of the database the list figures are measured over. */
export const workspaces = 10_000;
export const runs = 1_000_000;

/** The rows this bench reports. */
export function webRows(): ExpectedRow[] {
  const list = (db: string): ExpectedRow[] => [
    {
      bench: `web lists (${workspaces} workspaces, ${runs} runs, ${db})`,
      metric: "workspace page (50, newest run of each), p99",
      unit: "ms",
      target: "≤ 100 ms",
    },
    {
      bench: `web lists (${workspaces} workspaces, ${runs} runs, ${db})`,
      metric: "workspace search page, p99",
      unit: "ms",
      target: "≤ 100 ms",
    },
    {
      bench: `web lists (${workspaces} workspaces, ${runs} runs, ${db})`,
      metric: "a workspace's run page (25), p99",
      unit: "ms",
      target: "≤ 100 ms",
    },
  ];
  return [
    { bench: "web UI", metric: "JavaScript shipped, gzipped", unit: "KB", target: "≤ 200 KB" },
    {
      bench: "web UI",
      metric: "run page with a 200,000-line log: load → last line shown after End, median of 3",
      unit: "ms",
      target: "≤ 1500 ms",
    },
    ...list("SQLite"),
    ...list("PostgreSQL"),
  ];
}
