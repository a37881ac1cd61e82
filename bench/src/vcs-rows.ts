import type { ExpectedRow } from "./report.js";

/** The vcs bench's rows at its default sizes (kept apart so a failed import of the bench still lists them). */
export function vcsRows(): ExpectedRow[] {
  return [
    {
      bench: "vcs (one push, 100 linked workspaces)",
      metric: "webhook POST → last run queued",
      unit: "ms",
      target: "≤ 1000 ms",
    },
    {
      bench: "vcs (50 push deliveries, one workspace each)",
      metric: "webhook → run queued p99, fetch excluded",
      unit: "ms",
      target: "≤ 100 ms",
    },
    {
      bench: "vcs (relay, 500 commit API calls)",
      metric: "relay overhead per VCS API call p99",
      unit: "ms",
      target: "≤ 10 ms",
    },
    {
      bench: "vcs (50 MB repository through a VCS agent)",
      metric: "fetched, packed and stored",
      unit: "MB/s",
      target: "≥ 50 MB/s",
    },
  ];
}
