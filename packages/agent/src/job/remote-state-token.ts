/*
 * The run's credential for `terraform_remote_state` (decision 0072): terraform looks a host's
 * token up in `TF_TOKEN_<host>` before any CLI configuration, so the agent names the server's
 * hostname there with the job token, which the server lets read only the state this
 * workspace may read. Terraform's naming: dots become `_`, hyphens `__`; a port stays as
 * `:port` (such a name cannot be set from a shell, but a process environment holds it fine).
 */

/** The variable terraform reads `hostname`'s token from. */
export function tokenVariable(hostname: string): string {
  return `TF_TOKEN_${hostname.toLowerCase().replace(/-/g, "__").replace(/\./g, "_")}`;
}

/** The host a `TF_TOKEN_…` variable gives a token for (lowercase), or undefined for any other name. */
export function tokenVariableHost(name: string): string | undefined {
  if (!name.startsWith("TF_TOKEN_")) return undefined;
  // terraform's own reading: `__` first, then every `_` left; dots and hyphens written as such stay.
  return name.slice("TF_TOKEN_".length).replace(/__/g, "-").replace(/_/g, ".").toLowerCase();
}

/**
 * Puts the job token in `env` for `hostname`, unless one of the workspace's own environment
 * variables names that host (the user's choice wins). Variables for that host the agent's own
 * environment passed on are dropped: two spellings of one host would leave terraform to pick
 * either.
 */
export function giveRemoteStateToken(
  env: NodeJS.ProcessEnv,
  hostname: string,
  token: string,
  workspaceEnvKeys: readonly string[],
): void {
  const host = hostname.toLowerCase();
  if (workspaceEnvKeys.some((k) => tokenVariableHost(k) === host)) return;
  for (const key of Object.keys(env)) if (tokenVariableHost(key) === host) delete env[key];
  env[tokenVariable(hostname)] = token;
}
