import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * `git` for building test repositories, as `name <email>`, reading no system or user
 * configuration; returns its trimmed output. Synchronous: call it only while no in-process
 * server is waiting on it.
 */
export function gitAs(name: string, email: string): (cwd: string, ...args: string[]) => string {
  return (cwd, ...args) =>
    execFileSync("git", args, {
      cwd,
      encoding: "utf8",
      env: {
        ...process.env,
        GIT_CONFIG_NOSYSTEM: "1",
        GIT_CONFIG_GLOBAL: "/dev/null",
        GIT_AUTHOR_NAME: name,
        GIT_AUTHOR_EMAIL: email,
        GIT_COMMITTER_NAME: name,
        GIT_COMMITTER_EMAIL: email,
      },
    }).trim();
}

/**
 * A bare repository `<root>/<path>.git` on branch main, as a VCS host keeps one, and a work tree
 * pushing to it (`<root>/work-<path with - for />`); returns the work tree.
 */
export function hostedRepository(git: (cwd: string, ...args: string[]) => string, root: string, path: string): string {
  git(root, "init", "-q", "--bare", "-b", "main", `${path}.git`);
  const work = join(root, `work-${path.replace(/\//g, "-")}`);
  git(root, "init", "-q", "-b", "main", work);
  git(work, "remote", "add", "origin", join(root, `${path}.git`));
  return work;
}

/**
 * Writes `files` into the work tree `work` (null removes one), commits them as `message` with
 * `git` and pushes HEAD to `branch` of its origin; the new commit's sha.
 */
export function commitAndPush(
  git: (cwd: string, ...args: string[]) => string,
  work: string,
  branch: string,
  message: string,
  files: Record<string, string | null>,
): string {
  for (const [path, content] of Object.entries(files)) {
    if (content === null) rmSync(join(work, path), { force: true });
    else {
      mkdirSync(join(work, path, ".."), { recursive: true });
      writeFileSync(join(work, path), content);
    }
  }
  git(work, "add", "-A");
  git(work, "commit", "-q", "-m", message);
  git(work, "push", "-q", "origin", `HEAD:${branch}`);
  return git(work, "rev-parse", "HEAD");
}

/** A configuration of one terraform_data resource holding `value`, with an output `v` of it. */
export function valueConfig(value: string): string {
  return `resource "terraform_data" "v" {\n  input = "${value}"\n}\noutput "v" {\n  value = terraform_data.v.output\n}\n`;
}
