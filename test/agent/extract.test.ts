import assert from "node:assert/strict";
import { extractConfiguration } from "@drover/agent";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { gunzipSync, gzipSync } from "node:zlib";
import { backslashLinkEntries, rawTarGz, type RawEntry } from "../support/archives.js";

// The agent re-checks every configuration it unpacks: even an archive that slipped past the
// server must write nothing outside the run directory.

const malicious: Array<[string, RawEntry[]]> = [
  ["a path climbing out with ..", [{ path: "../escaped", content: "x" }]],
  ["an absolute path", [{ path: "/tmp/drover-escaped-absolute", content: "x" }]],
  [
    "a symlink out of the root, then a file written through it",
    [
      { path: "link", type: "symlink", linkpath: "../" },
      { path: "link/escaped", content: "x" },
    ],
  ],
  ["an absolute symlink", [{ path: "etc", type: "symlink", linkpath: "/etc" }]],
  ["a hard link to a file outside", [{ path: "hl", type: "hardlink", linkpath: "../secret" }]],
  ["a device", [{ path: "dev", type: "chardev" }]],
  [
    "a symlink chain out of the root (each link text-safe on its own)",
    [
      { path: "a/", type: "dir" },
      { path: "a/b", type: "symlink", linkpath: ".." },
      { path: "c", type: "symlink", linkpath: "a/b/.." },
      { path: "c/escaped", content: "x" },
    ],
  ],
  ["data after the end-of-archive marker", []],
  // Security review N3: read with backslashes as separators, this target climbs back into the root.
  [
    "a symlink whose target hides 40 levels in one backslashed name (review N3)",
    [...backslashLinkEntries(40, "tmp/x"), { path: "main.tf", content: "" }],
  ],
  [
    "a hard link to a symlink (review N16)",
    [
      { path: "f", content: "x" },
      { path: "s", type: "symlink", linkpath: "f" },
      { path: "h", type: "hardlink", linkpath: "s" },
    ],
  ],
];

for (const [what, entries] of malicious) {
  test(`an archive with ${what} is refused and writes nothing outside the run directory`, async () => {
    const parent = mkdtempSync(join(tmpdir(), "drover-extract-"));
    try {
      const runDir = join(parent, "run");
      const archive =
        entries.length > 0
          ? rawTarGz(entries)
          : gzipSync(
              Buffer.concat([gunzipSync(rawTarGz([{ path: "main.tf", content: "" }])), Buffer.from("trailing")]),
            );
      await assert.rejects(extractConfiguration(archive, runDir), (err: Error & { code?: string }) => {
        assert.equal(err.code, "invalid_archive");
        return true;
      });
      assert.deepEqual(
        readdirSync(parent).filter((n) => n !== "run"),
        [],
        "nothing beside the run directory",
      );
      assert.ok(!existsSync("/tmp/drover-escaped-absolute"));
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });
}

test("a well-formed archive with a link inside the root unpacks", async () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-extract-"));
  try {
    await extractConfiguration(
      rawTarGz([
        { path: "mod", type: "dir" },
        { path: "mod/main.tf", content: "# ok\n" },
        { path: "alias.tf", type: "symlink", linkpath: "mod/main.tf" },
      ]),
      dir,
    );
    assert.equal(readFileSync(join(dir, "alias.tf"), "utf8"), "# ok\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a backslash is an ordinary character of a name, as on Linux", async () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-extract-"));
  try {
    await extractConfiguration(
      rawTarGz([
        { path: "a\\b.tf", content: "# ok\n" },
        { path: "alias.tf", type: "symlink", linkpath: "a\\b.tf" },
      ]),
      dir,
    );
    assert.deepEqual(readdirSync(dir).sort(), ["a\\b.tf", "alias.tf"]);
    assert.equal(readFileSync(join(dir, "alias.tf"), "utf8"), "# ok\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
