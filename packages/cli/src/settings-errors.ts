import { DroverError, oneLineError, unknownSettingWarnings } from "@drover/protocol";
import { io } from "./io.js";

/** Loads a command's settings, or prints the one-line reason and exits 2. */
export function settingsOrExit<T>(command: string, load: () => T): T {
  try {
    return load();
  } catch (err) {
    if (err instanceof DroverError) {
      process.stderr.write(`drover ${command}: ${oneLineError(err)}\n`);
      process.exit(2);
    }
    throw err;
  }
}

/** Warns on stderr about each DROVER_* variable no Drover process reads (a misspelling would be ignored silently). */
export function warnUnknownSettings(env: NodeJS.ProcessEnv): void {
  for (const warning of unknownSettingWarnings(env)) io().stderr.write(`drover: warning: ${warning}\n`);
}
