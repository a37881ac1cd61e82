#!/usr/bin/env node
// The `drover` entry point.
import { main } from "./program.js";

await main();
