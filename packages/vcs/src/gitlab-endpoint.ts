import type { VcsEndpoint } from "./operations.js";

/**
 * What Gitbeaker is given for a GitLab connection: the API base without `/api/v4` (Gitbeaker
 * appends it itself) and the token. Checked when a client is made, before Gitbeaker is loaded.
 */
export function gitlabAccess(endpoint: VcsEndpoint): { host: string; token: string } {
  const { auth, apiUrl } = endpoint;
  if (auth.kind !== "token") throw new Error("a GitLab connection authenticates with a token");
  if (!/\/api\/v4$/.test(apiUrl)) throw new Error(`a GitLab API URL ends in /api/v4, not ${JSON.stringify(apiUrl)}`);
  return { host: apiUrl.replace(/\/api\/v4$/, ""), token: auth.token };
}
