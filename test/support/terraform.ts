import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** Environment for running the real terraform offline in `dir`: its own empty CLI config. */
export function terraformEnv(dir: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const config = join(dir, ".terraformrc");
  writeFileSync(config, "");
  return {
    ...process.env,
    TF_CLI_CONFIG_FILE: config,
    CHECKPOINT_DISABLE: "1",
    TF_IN_AUTOMATION: "1",
    TF_INPUT: "0",
    ...extra,
  };
}

/** Runs terraform; resolves with exit code and combined output. */
export function runTerraform(
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("terraform", args, { cwd, env });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    child.on("error", reject);
    // "close", not "exit": the process may exit before its output has all been read.
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}
