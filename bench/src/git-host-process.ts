import { gitServer } from "./git-host.js";

// The bench's VCS host as a process of its own (see gitServerProcess): prints its URL, serves until killed.
const [root, host] = process.argv.slice(2);
if (!root || !host) throw new Error("usage: git-host-process <repositories root> <address>");
const server = await gitServer(root, host);
process.stdout.write(`${server.url}\n`);
process.once("SIGTERM", () => void server.close().then(() => process.exit(0)));
