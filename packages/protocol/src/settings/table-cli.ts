import { text, intIn } from "./parsers.js";
import { setting } from "./spec.js";

/** The settings of the CLI. */
export const cliSettings = {
  // ---- CLI ----
  DROVER_CONFIG_DIR: setting({
    doc: "where `drover login` keeps its credentials",
    defaultText: "`$XDG_CONFIG_HOME/drover` or `~/.config/drover`",
    readers: ["cli"],
    parse: text,
    section: "cli",
  }),
  XDG_CONFIG_HOME: setting({
    doc: "base of the default `DROVER_CONFIG_DIR`",
    defaultText: "`~/.config`",
    readers: ["cli"],
    parse: text,
    section: "cli",
  }),
  DROVER_CLIENT_TIMEOUT_SECONDS: setting({
    flag: "--timeout",
    doc: "deadline of one API call of the CLI, its answer included (a log `--follow` adds the server's wait to it); past it the call fails with `server_unreachable`",
    default: 60,
    readers: ["cli"],
    parse: intIn(1, 3600),
    section: "cli",
  }),
  DROVER_CLIENT_RECONNECT_SECONDS: setting({
    doc: "how long `run start`, `run confirm` and `run logs --follow` keep retrying, with backoff, while the server they follow a run on does not answer (a restart); past it they exit 3 and the run goes on on the agent",
    default: 300,
    readers: ["cli"],
    parse: intIn(0, 86_400),
    section: "cli",
  }),
} as const;
