import { DroverError, unknownSettingWarnings } from "@drover/protocol";
import { io } from "./io.js";

/** One line for a coded error, as `printError` writes it: the message, its code, what to do. */
export function describeError(err: DroverError): string {
  return `${err.message} (${err.code})${err.hint ? ` ${err.hint}` : ""}`;
}

/** Loads a command's settings, or prints the one-line reason and exits 2. */
export function settingsOrExit<T>(command: string, load: () => T): T {
  try {
    return load();
  } catch (err) {
    if (err instanceof DroverError) {
      process.stderr.write(`drover ${command}: ${describeError(err)}\n`);
      process.exit(2);
    }
    throw err;
  }
}

/** Warns on stderr about each DROVER_* variable no Drover process reads (a misspelling would be ignored silently). */
export function warnUnknownSettings(env: NodeJS.ProcessEnv): void {
  for (const warning of unknownSettingWarnings(env)) io().stderr.write(`drover: warning: ${warning}\n`);
}
