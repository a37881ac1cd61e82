import { createServer, connect, type Server, type Socket } from "node:net";

/**
 * What the proxy does with connections: `open` forwards them, `refuse` closes new and existing
 * ones at once (the client sees its connection closed), `blackhole` accepts and holds them and drops every
 * byte both ways (a cut cable or a dead firewall: calls hang until their deadline).
 */
export type ProxyMode = "open" | "refuse" | "blackhole";

/**
 * A TCP proxy between a client (an agent, a controller) and a target (the Drover server, the
 * API server) that the test controls. TLS passes through untouched.
 */
export interface TcpProxy {
  /** `http(s)://127.0.0.1:<port>`, with the target's scheme when it is an http(s) URL: give it to the agent as DROVER_URL. */
  url: string;
  port: number;
  mode: ProxyMode;
  /** Switches mode; leaving `open` cuts every connection in flight so no request slips through. */
  set(mode: ProxyMode): void;
  /** Connections accepted so far (to wait until a client has tried). */
  readonly accepted: number;
  close(): Promise<void>;
}

/** Starts a proxy to `target` (host:port or URL) on a random local port. */
export async function startTcpProxy(target: string, mode: ProxyMode = "open"): Promise<TcpProxy> {
  const url = new URL(target.includes("://") ? target : `tcp://${target}`);
  const scheme = url.protocol === "https:" ? "https:" : "http:";
  const host = url.hostname;
  const port = Number(url.port);
  /** Client sockets, each with its upstream while forwarded. */
  const live = new Map<Socket, Socket | undefined>();
  let accepted = 0;
  const state = { mode };
  const hold = (client: Socket) => {
    // Read and drop: the client's writes succeed, nothing ever comes back.
    client.on("data", () => undefined);
    client.resume();
  };

  const server: Server = createServer((client) => {
    accepted++;
    live.set(client, undefined);
    client.on("close", () => {
      live.get(client)?.destroy();
      live.delete(client);
    });
    client.on("error", () => client.destroy());
    if (state.mode === "refuse") {
      // destroy(), not resetAndDestroy(): a reset that fails (the peer already half-closed) leaves
      // a handle that Node's exit cleanup then waits on for ever, spinning a core.
      client.destroy();
      return;
    }
    if (state.mode === "blackhole") {
      hold(client);
      return;
    }
    const upstream = connect(port, host);
    live.set(client, upstream);
    upstream.on("close", () => {
      // A blackholed pair keeps its client hanging; otherwise the end passes through.
      if (live.get(client) === upstream) client.destroy();
    });
    upstream.on("error", () => upstream.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const listenPort = (server.address() as { port: number }).port;

  return {
    url: `${scheme}//127.0.0.1:${listenPort}`,
    port: listenPort,
    get mode() {
      return state.mode;
    },
    get accepted() {
      return accepted;
    },
    set(next) {
      if (next === state.mode) return;
      state.mode = next;
      for (const [client, upstream] of live) {
        if (next === "refuse" || (next === "open" && !upstream)) {
          // Held connections never recover: the client must connect anew.
          client.destroy();
        } else if (next === "blackhole" && upstream) {
          live.set(client, undefined);
          client.unpipe(upstream);
          upstream.unpipe(client);
          upstream.destroy();
          hold(client);
        }
      }
    },
    async close() {
      for (const [client, upstream] of live) {
        client.destroy();
        upstream?.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
