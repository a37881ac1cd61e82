// Gates that hold a run's terraform until the test opens them, wherever that terraform runs: on
// this machine or inside a container of the locally built images (which see none of this
// machine's files but share its network). A provisioner connects to the gate server and waits
// for its answer, which the server holds until open(); no polling, no sleeps.
import { createServer, type ServerResponse } from "node:http";

/** The gate server of a test file. */
export interface RunGates {
  /**
   * A terraform `local-exec` provisioner block that prints `started-<name>`, then waits until
   * `open(name)` and prints `gate-open` (bash's /dev/tcp: the runner image has no curl).
   */
  provisioner(name: string): string;
  /** Lets every run waiting at gate `name` (and any that reaches it later) go on. */
  open(name: string): void;
  /** Provisioners waiting at gate `name` right now. */
  waiting(name: string): number;
  close(): Promise<void>;
}

/** Starts a gate server on 127.0.0.1. */
export async function startRunGates(): Promise<RunGates> {
  const held = new Map<string, ServerResponse[]>();
  const opened = new Set<string>();
  const answer = (res: ServerResponse): void => {
    res.writeHead(200, { "content-type": "text/plain", connection: "close" });
    res.end("gate-open\n");
  };
  const server = createServer((req, res) => {
    const name = decodeURIComponent((req.url ?? "").replace(/^\/gate\//, ""));
    if (opened.has(name)) return answer(res);
    const list = held.get(name) ?? [];
    list.push(res);
    held.set(name, list);
    res.on("close", () =>
      held.set(
        name,
        (held.get(name) ?? []).filter((r) => r !== res),
      ),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    provisioner(name) {
      // grep replaces the shell (exec), so a signal to the provisioner's process reaches the only
      // process holding its output; it fails when the connection drops without the answer.
      const get = `set -e; exec 3<>/dev/tcp/127.0.0.1/${port}; printf 'GET /gate/${encodeURIComponent(name)} HTTP/1.0\\r\\n\\r\\n' >&3; exec grep gate-open <&3`;
      return `  provisioner "local-exec" {\n    interpreter = ["/bin/bash", "-c"]\n    command = ${JSON.stringify(`echo started-${name}; ${get}`)}\n  }\n`;
    },
    open(name) {
      opened.add(name);
      for (const res of held.get(name) ?? []) answer(res);
      held.delete(name);
    },
    waiting: (name) => (held.get(name) ?? []).length,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
