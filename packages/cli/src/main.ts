#!/usr/bin/env node
// The `drover` entry point. It loads nothing of the CLI before deciding the heap mode: `drover
// agent run` starts with an idle agent's heap settings (decision 0031), which only take full
// effect when set before the modules are loaded.
import { enterIdleHeapMode } from "@drover/agent/heap-mode";
import type * as Program from "./program.js";

const agentRun = process.argv[2] === "agent" && process.argv[3] === "run";
if (agentRun) enterIdleHeapMode();
// `drover agent run` loads the CLI from its bundle (decision 0037: fewer, smaller sources for a
// long-lived idle process; scripts/bundle-agent.mjs); every other command from tsc's files.
const program = agentRun ? "../agent-bundle/program.js" : "./program.js";
const { main } = (await import(program)) as typeof Program;
await main();
