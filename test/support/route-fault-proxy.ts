import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * What the proxy does to a request whose method and path match: `fail` answers `status` itself;
 * `stall` reads the body and never answers (a server gone quiet mid-call); `slow upload` and
 * `slow download` pass the request's or the answer's body on over `ms`, in pieces, as a slow
 * link would (bytes keep coming, the whole takes long); `hold answer` passes the server's answer
 * on only once `until` has settled, so a test acts between a call's answer and the client's next
 * call (another writer's request landing there).
 */
export type RouteFault =
  | { kind: "fail"; status: number }
  | { kind: "stall" }
  | { kind: "slow upload"; ms: number }
  | { kind: "slow download"; ms: number }
  | { kind: "hold answer"; until: (request: HeldRequest, answer: HeldAnswer) => Promise<void> };

/** A request whose answer a `hold answer` fault holds: its path with the query, headers and body. */
export interface HeldRequest {
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** The server's answer that a `hold answer` fault holds. */
export interface HeldAnswer {
  status: number;
  body: Buffer;
}

/** An HTTP proxy in front of one server that misbehaves on the routes a test names. */
export interface RouteFaultProxy {
  url: string;
  /** Applies `fault` to every request `method path` matches (path without the query). */
  set(method: string, path: RegExp, fault: RouteFault): void;
  /** Requests that matched a fault so far, with their body sizes. */
  readonly hits: { method: string; path: string; bodyBytes: number }[];
  /** Faulted requests whose client is still connected (a stalled call the client has not given up). */
  readonly open: number;
  close(): Promise<void>;
}

const pieceMs = 100;

/** Starts a proxy to `target` (http://host:port) on a random local port. */
export async function startRouteFaultProxy(target: string): Promise<RouteFaultProxy> {
  const upstream = new URL(target);
  const faults: { method: string; path: RegExp; fault: RouteFault }[] = [];
  const hits: RouteFaultProxy["hits"] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let open = 0;

  /** Writes `body` to `res` in pieces spread over `ms`, then ends it. */
  const trickle = (body: Buffer, ms: number, write: (piece: Buffer) => void, end: () => void) => {
    const pieces = Math.max(1, Math.ceil(ms / pieceMs));
    const size = Math.ceil(body.length / pieces);
    let at = 0;
    const next = () => {
      if (at >= body.length) return end();
      write(body.subarray(at, at + size));
      at += size;
      const t = setTimeout(() => {
        timers.delete(t);
        next();
      }, pieceMs);
      timers.add(t);
    };
    next();
  };

  const forward = (req: IncomingMessage, res: ServerResponse, body: Buffer, fault: RouteFault | undefined) => {
    const out = request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on("data", (c: Buffer) => chunks.push(c));
        answer.on("end", () => {
          const whole = Buffer.concat(chunks);
          if (fault?.kind === "hold answer") {
            const held = { url: req.url ?? "/", headers: req.headers, body };
            // A failing `until` is the test's own error: the client gets a 502, the test's assertions say why.
            void fault.until(held, { status: answer.statusCode ?? 502, body: whole }).then(
              () => res.writeHead(answer.statusCode ?? 502, answer.headers).end(whole),
              () => res.writeHead(502).end(),
            );
            return;
          }
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          if (fault?.kind === "slow download")
            trickle(
              whole,
              fault.ms,
              (p) => res.write(p),
              () => res.end(),
            );
          else res.end(whole);
        });
      },
    );
    out.on("error", () => res.destroy());
    if (fault?.kind === "slow upload")
      trickle(
        body,
        fault.ms,
        (p) => out.write(p),
        () => out.end(),
      );
    else out.end(body);
  };

  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    const fault = faults.find((f) => f.method === req.method && f.path.test(path))?.fault;
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      if (fault) {
        hits.push({ method: req.method ?? "", path, bodyBytes: body.length });
        open++;
        res.on("close", () => open--);
      }
      if (fault?.kind === "fail") res.writeHead(fault.status, { "content-type": "text/plain" }).end("disk full");
      else if (fault?.kind !== "stall") forward(req, res, body, fault);
    });
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    set(method, path, fault) {
      faults.unshift({ method, path, fault });
    },
    hits,
    get open() {
      return open;
    },
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
