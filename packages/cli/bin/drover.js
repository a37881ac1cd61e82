#!/usr/bin/env node
// The `drover` command. A committed file rather than the compiled entry point, so `npm ci` can
// link it before the build has run; it loads the compiled CLI, or says how to build it.
import { existsSync } from "node:fs";

const main = new URL("../dist/src/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(
    `drover: the CLI is not built (${main.pathname} is missing). Run \`npm run build\` in the Drover repository (\`npm ci\` builds it too), then try again.\n`,
  );
  process.exit(1);
}
await import(main.href);
