import { DroverError, messageOf } from "@drover/protocol";
import { readFileSync } from "node:fs";
import { io } from "./io.js";

/*
 * Secrets given on the command line are visible to every user of the machine
 * (/proc/<pid>/cmdline, `ps`) and land in shell history. These read them from a file or from
 * standard input instead.
 */

/** Reads all of standard input. */
export async function readStdin(): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of io().stdin) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

/** A secret from a file or stdin ("-" means stdin), with one trailing newline removed (what `echo` and editors add). */
export async function readSecret(source: string, what: string): Promise<string> {
  let text: string;
  try {
    text = source === "-" ? await readStdin() : readFileSync(source, "utf8");
  } catch (err) {
    throw new DroverError("bad_request", `cannot read the ${what} from ${source}: ${messageOf(err)}`);
  }
  const value = text.replace(/\r?\n$/, "");
  if (value === "")
    throw new DroverError(
      "bad_request",
      `the ${what} read from ${source === "-" ? "standard input" : source} is empty`,
    );
  return value;
}
