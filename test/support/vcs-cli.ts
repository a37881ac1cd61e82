/** `drover workspace link` arguments: the workspace linked to a branch of a repository on a VCS connection. */
export function linkArgs(workspace: string, connection: string, repository: string, branch: string): string[] {
  return ["workspace", "link", workspace, "--vcs", connection, "--repo", repository, "--branch", branch];
}
