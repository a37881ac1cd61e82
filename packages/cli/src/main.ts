#!/usr/bin/env node
// The `drover` entry point. It loads nothing of the CLI before deciding the heap mode: `drover
// agent run` starts with an idle agent's heap settings (decision 0031), which only take full
// effect when set before the modules are loaded.
import { existsSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { enterIdleHeapMode } from "@drover/agent/heap-mode";
import type * as Program from "./program.js";

const agentRun = process.argv[2] === "agent" && process.argv[3] === "run";
if (agentRun) enterIdleHeapMode();
// `drover agent run` loads the CLI from its bundle (decision 0037: fewer, smaller sources for a
// long-lived idle process; scripts/bundle-agent.mjs); every other command from tsc's files.
const program = agentRun ? "../agent-bundle/program.js" : "./program.js";
if (agentRun && !existsSync(new URL(program, import.meta.url))) {
  // tsc alone (`tsc -b`) does not write the bundle: say what builds it rather than fail on a module path.
  process.stderr.write(
    `drover: the agent bundle is not built (${fileURLToPath(new URL(program, import.meta.url))} is missing). Run \`npm run build\` in the Drover repository, then try again.\n`,
  );
  process.exit(1);
}
if (agentRun) {
  // `npx tsc -b` rewrites tsc's output but not the bundle, which would then run the old agent
  // without a word. The build-info files are absent where only dist/src ships (the image): no check.
  const bundle = statSync(new URL(program, import.meta.url)).mtimeMs;
  for (const pkg of ["protocol", "agent", "cli"]) {
    const info = new URL(`../../../${pkg}/dist/.tsbuildinfo`, import.meta.url);
    if (existsSync(info) && statSync(info).mtimeMs > bundle) {
      process.stderr.write(
        `drover: the agent bundle is older than the compiled packages (${fileURLToPath(info)} was written after ${fileURLToPath(new URL(program, import.meta.url))}) (agent_bundle_stale) Run \`npm ci && npm run build\` in the Drover repository, then try again.\n`,
      );
      process.exit(1);
    }
  }
}
const { main } = (await import(program)) as typeof Program;
await main();
