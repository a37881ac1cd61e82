import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { track } from "./harness.js";

/** A VCS host for the VCS bench: git's smart HTTP and one API call of GitHub's. */
export interface GitHost {
  url: string;
  close(): Promise<void>;
}

/** The fields of GitHub's "get a commit" answer that Drover reads. */
function commitBody(sha: string) {
  const who = { name: "Ada", email: "ada@example.com", date: "2026-11-29T00:00:00Z" };
  return { sha, commit: { message: "a commit", author: who, committer: who }, files: [], parents: [] };
}

/** Smart HTTP for the bare repositories below `root`, through `git http-backend`, and one API call. */
export async function gitServer(root: string, host = "127.0.0.1"): Promise<GitHost> {
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x");
    const path = decodeURIComponent(url.pathname);
    // One provider API call, a commit's details (the relayed calls below); nothing else: linking's
    // webhook registration is refused at once (the link then says what to register by hand).
    const commit = /^\/api\/v3\/repos\/[^/]+\/[^/]+\/commits\/([0-9a-f]{40})$/.exec(path);
    if (req.method === "GET" && commit) {
      res.writeHead(200, { "content-type": "application/json; charset=utf-8" });
      res.end(JSON.stringify(commitBody(commit[1]!)));
      return;
    }
    if (path.startsWith("/api/")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"message":"Not Found"}');
      return;
    }
    const cgi = spawn("git", ["http-backend"], {
      env: {
        ...process.env,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        REQUEST_METHOD: req.method ?? "GET",
        PATH_INFO: path,
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
        REMOTE_ADDR: host,
      },
    });
    // git may end before it read the whole request (a refusal): that is its answer, not a failure here.
    cgi.stdin.on("error", () => {});
    req.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    let started = false;
    cgi.stdout.on("data", (chunk: Buffer) => {
      if (started) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      started = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
        const [k, ...v] = line.split(":");
        if (k?.toLowerCase() === "status") status = Number(v.join(":").trim().split(" ")[0]);
        else if (k) res.setHeader(k, v.join(":").trim());
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.on("close", () => res.end());
  };
  const server = createServer(handle);
  await new Promise<void>((r) => server.listen(0, host, r));
  const address = server.address();
  return {
    url: `http://${host}:${typeof address === "object" && address ? address.port : 0}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * The same host in a process of its own, as a VCS host is another machine: in the bench's
 * process its answers would wait on the event loop of the Drover server measured beside it.
 */
export async function gitServerProcess(root: string, host: string): Promise<GitHost> {
  const child = track(
    spawn(process.execPath, [fileURLToPath(new URL("./git-host-process.js", import.meta.url)), root, host], {
      stdio: ["ignore", "pipe", "inherit"],
    }),
  );
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    void exited.then(() => reject(new Error("the bench's git host exited before it listened")));
  });
  return {
    url,
    close: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
