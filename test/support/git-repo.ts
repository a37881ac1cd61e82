import { execFileSync } from "node:child_process";

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
