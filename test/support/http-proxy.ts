import { createServer, request as httpRequest } from "node:http";
import { connect, type Socket } from "node:net";

/**
 * A forward HTTP proxy on 127.0.0.1, as a network's egress proxy is one: CONNECT tunnels and
 * absolute-form requests, each recorded by the host:port asked for. Only the hosts of `routes`
 * (host:port → the 127.0.0.1 port that serves it) are reached; any other is refused with 403,
 * so a name that exists only here proves a request went through the proxy. Tunnels go only to
 * port 443, as squid's default configuration allows: plain http must come in absolute form.
 */
export async function startHttpProxy(routes: Record<string, number>) {
  const seen: { method: string; target: string }[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://absent.invalid");
    const target = `${url.hostname}:${url.port || "80"}`;
    seen.push({ method: req.method ?? "GET", target });
    const port = routes[target];
    if (!/^https?:\/\//.test(req.url ?? "") || port === undefined) {
      res.writeHead(403).end(`the proxy does not reach ${target}`);
      return;
    }
    const upstream = httpRequest(
      { host: "127.0.0.1", port, method: req.method, path: url.pathname + url.search, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  server.on("connect", (req, client: Socket, head: Buffer) => {
    const target = req.url ?? "";
    seen.push({ method: "CONNECT", target });
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    const port = routes[target];
    if (port === undefined || !target.endsWith(":443")) {
      client.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const upstream = connect(port, "127.0.0.1", () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    sockets.add(upstream);
    upstream.on("close", () => sockets.delete(upstream));
    upstream.on("error", () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    /** Every request the proxy took, in order: its method (CONNECT for a tunnel) and host:port. */
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
