import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

/*
 * octokit and gitbeaker are most of what loading the VCS package costs (~0.2 s of CPU), and every
 * server loads that package, also one without VCS connections. A provider's library is loaded when
 * a connection of that provider is first called. The module watch records what a process resolved.
 */

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
const watchModule = join(repo, "test", "dist", "support", "module-watch.js");

/** Loads the server, then calls a GitHub and a GitLab connection (nothing listens); marks each step in the log. */
const script = `
import { appendFileSync } from "node:fs";
const mark = (m) => appendFileSync(process.env.DROVER_TEST_MODULE_LOG, "--- " + m + "\\n");
await import("@drover/server");
const { vcsClient } = await import("@drover/vcs");
mark("server loaded");
const sha = "a".repeat(40);
const github = vcsClient({ provider: "github", url: "http://127.0.0.1:9", apiUrl: "http://127.0.0.1:9", auth: { kind: "token", token: "t" } }, { deadlineMs: 5000 });
const failed = await github.run({ op: "commit", repository: "org/infra", sha }).then(() => "answered", (e) => e.message);
mark("github called: " + failed);
const gitlab = vcsClient({ provider: "gitlab", url: "http://127.0.0.1:9", apiUrl: "http://127.0.0.1:9/api/v4", auth: { kind: "token", token: "t" } }, { deadlineMs: 5000 });
mark("gitlab called: " + (await gitlab.run({ op: "commit", repository: "org/infra", sha }).then(() => "answered", (e) => e.message)));
`;

/** The log's lines between the marks: what each step loaded. */
function steps(log: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let lines: string[] = [];
  for (const line of log.split("\n").filter(Boolean)) {
    if (line.startsWith("--- ")) {
      out.set(line.slice(4), lines);
      lines = [];
    } else lines.push(line);
  }
  return out;
}

const loads = (urls: string[] | undefined, name: string) =>
  (urls ?? []).some((u) => u.includes(`/node_modules/${name}/`));

test("a server loads no VCS provider's library until a connection of that provider is called", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-vcs-loading-"));
  try {
    const log = join(dir, "modules.log");
    const run = spawnSync(process.execPath, [`--import=${watchModule}`, "--input-type=module", "-e", script], {
      cwd: repo,
      env: { ...process.env, DROVER_TEST_MODULE_LOG: log },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(run.status, 0, run.stderr);
    const [[, server = []] = [], [githubStep = "", github = []] = [], [gitlabStep = "", gitlab = []] = []] = [
      ...steps(readFileSync(log, "utf8")),
    ];
    assert.ok(
      loads(server, "@drover/server") || server.some((u) => u.includes("/packages/server/")),
      "the server loaded",
    );
    assert.ok(
      !loads(server, "@octokit/rest") && !loads(server, "@gitbeaker/rest"),
      "no provider library with the server",
    );
    // The calls reached the providers' code: each failed on the connection, not before it.
    assert.match(githubStep, /^github called: GitHub API call commit failed/);
    assert.ok(loads(github, "@octokit/rest") && !loads(github, "@gitbeaker/rest"), "octokit at the first GitHub call");
    assert.match(gitlabStep, /^gitlab called: GitLab API call commit failed/);
    assert.ok(loads(gitlab, "@gitbeaker/rest"), "gitbeaker at the first GitLab call");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
