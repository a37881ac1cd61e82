import type { Command } from "commander";

/** `drover quickstart`: server on SQLite + a local agent (what `npm start` runs). */
export function registerQuickstartCommand(_program: Command): void {}
