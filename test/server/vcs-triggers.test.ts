import assert from "node:assert/strict";
import { test } from "node:test";
import { commitTriggers, globPattern } from "@drover/server";

test("trigger globs: ** crosses directories, * and ? stay within one, dir/ is everything below", () => {
  const cases: [string, string, boolean][] = [
    ["modules/**", "modules/net/main.tf", true],
    ["modules/**", "modules.tf", false],
    ["modules/*.tf", "modules/a.tf", true],
    ["modules/*.tf", "modules/net/a.tf", false],
    ["**/*.tf", "main.tf", true],
    ["**/*.tf", "a/b/c.tf", true],
    ["**/*.tf", "a/b/c.tfvars", false],
    ["envs/?/main.tf", "envs/a/main.tf", true],
    ["envs/?/main.tf", "envs/ab/main.tf", false],
    ["shared/", "shared/x/y", true],
    ["a.b", "axb", false],
    ["(x)", "(x)", true],
  ];
  for (const [glob, path, expected] of cases) assert.equal(globPattern(glob).test(path), expected, `${glob} ~ ${path}`);
});

test("a commit triggers with no trigger paths, with unknown changes, in the working directory, or on a match", () => {
  assert.equal(commitTriggers(["docs/a.md"], [], "envs/prod"), true);
  assert.equal(commitTriggers(null, ["modules/**"], ""), true);
  assert.equal(commitTriggers(["envs/prod/main.tf"], ["modules/**"], "envs/prod"), true);
  assert.equal(commitTriggers(["envs/production/main.tf"], ["modules/**"], "envs/prod"), false);
  assert.equal(commitTriggers(["modules/x.tf"], ["modules/**"], "envs/prod"), true);
  assert.equal(commitTriggers(["docs/a.md"], ["modules/**"], "./envs/prod/"), false);
  // The root as working directory would match everything: there only the globs decide.
  assert.equal(commitTriggers(["docs/a.md"], ["modules/**"], ""), false);
});
