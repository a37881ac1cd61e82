// Regenerates the README's configuration tables from the settings table
// (packages/protocol/src/settings.ts). Run after `npm run build`:
//
//   node scripts/settings-docs.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { withSettingsTables } from "../packages/protocol/dist/src/settings.js";

const readme = join(dirname(fileURLToPath(import.meta.url)), "..", "README.md");
const before = readFileSync(readme, "utf8");
const after = withSettingsTables(before);
if (after !== before) writeFileSync(readme, after);
process.stdout.write(
  after === before ? "README.md: settings tables already current\n" : "README.md: settings tables regenerated\n",
);
