/** `drover workspace link` arguments: the workspace linked to a branch of a repository on a VCS connection. */
export function linkArgs(workspace: string, connection: string, repository: string, branch: string): string[] {
  return ["workspace", "link", workspace, "--vcs", connection, "--repo", repository, "--branch", branch];
}

/** `drover vcs connect` arguments: a GitHub connection reached through the VCS agents of `pool`. */
export function viaPoolConnectArgs(connection: string, vcsUrl: string, pool: string): string[] {
  return ["vcs", "connect", connection, "--provider", "github", "--vcs-url", vcsUrl, "--via-pool", pool];
}
