import { existingPath, intIn, ipAddress } from "./parsers.js";
import { setting } from "./spec.js";

/** The settings of `drover agent vcs` beyond those every agent has. */
export const vcsAgentSettings = {
  DROVER_AGENT_VCS_CONNECTIONS_FILE: setting({
    doc:
      "`drover agent vcs`: JSON file of the connections this VCS agent reaches, by connection name: " +
      '`{"<name>": {"provider": "github"|"gitlab", "url", "apiUrl", "token", "webhookSecret"}}`, or instead of ' +
      '`token` a GitHub App: `"githubApp": {"appId", "installationId", "privateKeyFile"}`; ' +
      "the server may hold none of these credentials",
    readers: ["vcs-agent"],
    parse: existingPath,
    section: "agent",
  }),
  DROVER_AGENT_VCS_CONCURRENCY: setting({
    doc: "`drover agent vcs`: tasks (operations and fetches) one VCS agent runs at once",
    default: 4,
    readers: ["vcs-agent"],
    parse: intIn(1, 64),
    section: "agent",
  }),
  DROVER_AGENT_VCS_WEBHOOK_PORT: setting({
    doc: "`drover agent vcs`: port of the webhook listener inside the private network (`POST /hooks/<connection>`); 0: none",
    default: 0,
    readers: ["vcs-agent"],
    parse: intIn(0, 65_535),
    section: "agent",
  }),
  DROVER_AGENT_VCS_WEBHOOK_ADDRESS: setting({
    doc: "`drover agent vcs`: address the webhook listener binds",
    defaultText: "every interface",
    readers: ["vcs-agent"],
    parse: ipAddress,
    section: "agent",
  }),
};
