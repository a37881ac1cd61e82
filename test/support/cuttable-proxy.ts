import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy to `target` that a test can cut (every open connection reset, new ones refused)
 * and restore: a server or API server that is unreachable for a while, as the process behind
 * it sees it. TLS passes through untouched.
 */
export interface CuttableProxy {
  /** `http(s)://127.0.0.1:<port>` with the target's scheme. */
  url: string;
  port: number;
  /** Connections refused while cut. */
  refused: number;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startCuttableProxy(targetUrl: string, options: { cut?: boolean } = {}): Promise<CuttableProxy> {
  const target = new URL(targetUrl);
  const open = new Set<Socket>();
  let down = options.cut === true;
  const server: Server = createServer((client) => {
    if (down) {
      proxy.refused++;
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(Number(target.port), target.hostname);
    open.add(client).add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const proxy: CuttableProxy = {
    url: `${target.protocol}//127.0.0.1:${port}`,
    port,
    refused: 0,
    cut() {
      down = true;
      for (const s of open) s.resetAndDestroy();
      open.clear();
    },
    restore() {
      down = false;
    },
    close() {
      proxy.cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
