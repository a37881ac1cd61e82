#!/usr/bin/env node
// The `drover` entry point. It loads nothing of the CLI before deciding the heap mode: `drover
// agent run` starts with an idle agent's heap settings (decision 0031), which only take full
// effect when set before the modules are loaded.
import { enterIdleHeapMode } from "@drover/agent/heap-mode";

if (process.argv[2] === "agent" && process.argv[3] === "run") enterIdleHeapMode();
const { main } = await import("./program.js");
await main();
