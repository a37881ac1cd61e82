import { spawn } from "node:child_process";
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { createServer as createTlsServer, type Server as TlsServer } from "node:https";

/**
 * git's smart HTTP protocol on 127.0.0.1 (or `host`) for the repositories below `root`, through
 * `git http-backend` as a CGI program; counts requests by path (module-cache tests). With `tls`
 * (a certificate and its key) it is HTTPS. With `basicAuth` every request must carry that HTTP
 * Basic credential: others get 401 (`refused` counts them). With `beforeFetch`, a request that
 * fetches objects (protocol v2's `command=fetch`) waits for it before git answers.
 */
export async function startGitHttpServer(
  root: string,
  tls?: { cert: string; key: string },
  options: {
    /** The one password accepted, or a check of each (a GitHub App's minted tokens). */
    basicAuth?: { user: string; password: string | ((given: string) => boolean) };
    host?: string;
    beforeFetch?: () => Promise<void>;
    /**
     * Requests under `prefix` go to `target` (an API stand-in) untouched, as GitHub Enterprise
     * Server serves its REST API under /api/v3 on the host that serves git.
     */
    api?: { prefix: string; target: string };
  } = {},
): Promise<{ url: string; requests: string[]; refused: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const refused: string[] = [];
  const accepted = (header: string | undefined): boolean => {
    const auth = options.basicAuth;
    if (auth === undefined) return true;
    const m = /^Basic (.+)$/.exec(header ?? "");
    const given = m ? Buffer.from(m[1]!, "base64").toString() : "";
    const colon = given.indexOf(":");
    if (colon < 0 || given.slice(0, colon) !== auth.user) return false;
    const password = given.slice(colon + 1);
    return typeof auth.password === "string" ? password === auth.password : auth.password(password);
  };
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? "/", "http://x");
    if (options.api && url.pathname.startsWith(`${options.api.prefix}/`)) {
      forward(req, res, options.api.target);
      return;
    }
    requests.push(url.pathname);
    if (!accepted(req.headers.authorization)) {
      refused.push(url.pathname);
      res.writeHead(401, { "www-authenticate": 'Basic realm="git"', "content-type": "text/plain" });
      res.end("authentication required\n");
      return;
    }
    const cgi = spawn("git", ["http-backend"], {
      env: {
        ...process.env,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        REQUEST_METHOD: req.method ?? "GET",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
        REMOTE_ADDR: options.host ?? "127.0.0.1",
      },
    });
    // git may exit before it has read the whole body, or be gone when a held fetch resumes (its
    // client left): writing to it then fails with EPIPE, which is no failure of the test's.
    cgi.stdin.on("error", () => undefined);
    // A client that leaves (a killed agent) takes its git process with it.
    res.on("close", () => cgi.kill());
    cgi.on("error", (err) => {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    });
    if (options.beforeFetch === undefined) req.pipe(cgi.stdin);
    else {
      const body: Buffer[] = [];
      req.on("data", (c: Buffer) => body.push(c));
      req.on("end", () => {
        const all = Buffer.concat(body);
        const go = () => cgi.stdin.end(all);
        if (all.includes("command=fetch")) void options.beforeFetch!().then(go);
        else go();
      });
    }
    let head = Buffer.alloc(0);
    let started = false;
    cgi.stdout.on("data", (chunk: Buffer) => {
      if (started) {
        res.write(chunk);
        return;
      }
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      started = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
        const [k, ...v] = line.split(":");
        const value = v.join(":").trim();
        if (k?.toLowerCase() === "status") status = Number(value.split(" ")[0]);
        else if (k) res.setHeader(k, value);
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.on("close", () => res.end());
  };
  const server: Server | TlsServer = tls ? createTlsServer(tls, handle) : createServer(handle);
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((r) => server.listen(0, host, r));
  const address = server.address();
  return {
    url: `${tls ? "https" : "http"}://${host}:${typeof address === "object" && address ? address.port : 0}`,
    requests,
    refused,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Sends a request on to `target` as it came, and its answer back. */
function forward(req: IncomingMessage, res: ServerResponse, target: string): void {
  const to = new URL(req.url ?? "/", target);
  const upstream = httpRequest(to, { method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
    res.writeHead(up.statusCode ?? 502, up.headers);
    up.pipe(res);
  });
  upstream.on("error", (err) => res.writeHead(502).end(String(err)));
  req.pipe(upstream);
}
