import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { quickstartCommands } from "@drover/cli/quickstart-commands";

// The quickstart prints commands to run in another terminal; they must run as written there, not
// only from the repository's root (test/install runs them from the root).

const root = resolve(fileURLToPath(new URL("../../../", import.meta.url)));

test("from the repository's root the quickstart prints npx drover and the example's relative path", () => {
  assert.deepEqual(quickstartCommands(root), {
    cli: "npx drover",
    example: "examples/hello",
    where: "from this directory",
  });
});

test("from another directory it prints the CLI's own file and the example's full path, which work there", () => {
  const elsewhere = mkdtempSync(join(tmpdir(), "drover-quickstart-elsewhere-"));
  try {
    const printed = quickstartCommands(elsewhere);
    assert.equal(printed.example, join(root, "examples", "hello"));
    assert.equal(printed.where, "from any directory");
    const help = spawnSync("sh", ["-c", `${printed.cli} run start --help && ls ${printed.example}/main.tf`], {
      cwd: elsewhere,
      encoding: "utf8",
    });
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /Usage: drover run start/);
  } finally {
    rmSync(elsewhere, { recursive: true, force: true });
  }
});
