import { awaitsConfirmation, isTerminalRun, type RunStatus } from "@drover/protocol";

/** `run start` exit codes: 0 succeeded, 2 waits for confirmation, 1 failed. */
export function exitCodeFor(status: RunStatus): number {
  switch (status) {
    case "applied":
    case "planned_and_finished":
      return 0;
    case "planned":
      return 2;
    default:
      return 1;
  }
}

/**
 * The CLI stopped following a run it could no longer reach the server about: the run's outcome
 * is unknown here (it goes on on the agent), so neither 0 nor the 1 of a failed run.
 */
export const exitFollowLost = 3;

/** Whether the CLI stops following a run in this state. */
export function settled(status: RunStatus): boolean {
  return isTerminalRun(status) || awaitsConfirmation(status);
}
