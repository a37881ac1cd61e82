import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import { join } from "node:path";
import { freePort } from "./processes.js";
import { startStack, writeConfig, type Stack } from "./stack.js";

/*
 * The real terraform against Drover through its `cloud` block, offline: a CLI config `host`
 * block points the made-up hostname at the server's /api/v2 over plain HTTP (no discovery, no
 * DNS), with the token in a `credentials` block. Between terraform and the server sits a
 * recording proxy, the public URL the server hands out, so every request terraform makes —
 * capability URLs included — is recorded with whether it carried a token.
 */

/** One request terraform sent. */
export interface RecordedRequest {
  method: string;
  /** Path and query. */
  url: string;
  /** Whether it carried an Authorization header. */
  authorized: boolean;
  userAgent: string | undefined;
}

/** How to choose the workspace in the cloud block. */
export type CloudWorkspaces = { name: string } | { tags: string[] };

export interface TerraformCloud {
  stack: Stack;
  /** The cloud block's hostname, which only the CLI config resolves. */
  hostname: string;
  organization: string;
  /** Where terraform reaches the server: the recording proxy. */
  url: string;
  /** Every request through the proxy, in order. */
  requests: RecordedRequest[];
  /** A configuration directory with a `cloud` block and the given files. */
  config(name: string, workspaces: CloudWorkspaces, files?: Record<string, string>): string;
  /** terraform's environment: a scratch HOME, its own CLI config with the host and credentials blocks. */
  env(extra?: Record<string, string>): NodeJS.ProcessEnv;
  /** Runs terraform in `cwd`; `input` answers its first prompt on stdin (TF_INPUT unset, so it asks). */
  terraform(args: string[], cwd: string, options?: TerraformOptions): Promise<{ code: number; output: string }>;
  /** Starts terraform without waiting, for tests that signal it or answer prompts as output comes. */
  spawnTerraform(args: string[], cwd: string, options?: TerraformOptions): TerraformProcess;
  stop(): Promise<void>;
}

export interface TerraformOptions {
  /** The answer to terraform's first prompt ("Enter a value:"), written once it asks. */
  input?: string;
  /** The CLI to run (default `terraform`): `tofu` reads the same CLI config and cloud block. */
  binary?: string;
  env?: Record<string, string>;
}

export interface TerraformProcess {
  child: ChildProcess;
  output(): string;
  /** Resolves once the output matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  done: Promise<{ code: number; output: string }>;
}

/** A main.tf `terraform { cloud { … } }` block. */
export function cloudBlock(hostname: string, organization: string, workspaces: CloudWorkspaces): string {
  const ws =
    "name" in workspaces ? `name = ${JSON.stringify(workspaces.name)}` : `tags = ${JSON.stringify(workspaces.tags)}`;
  return [
    "terraform {",
    "  cloud {",
    `    hostname     = ${JSON.stringify(hostname)}`,
    `    organization = ${JSON.stringify(organization)}`,
    `    workspaces { ${ws} }`,
    "  }",
    "}",
    "",
  ].join("\n");
}

/** A CLI config whose `host` block sends `hostname`'s TFE services to `url`, and its token. */
export function cliConfig(hostname: string, url: string, token: string | undefined): string {
  const api = `${url}/api/v2/`;
  return [
    `host ${JSON.stringify(hostname)} {`,
    `  services = { "tfe.v2" = ${JSON.stringify(api)}, "tfe.v2.1" = ${JSON.stringify(api)} }`,
    "}",
    ...(token === undefined ? [] : [`credentials ${JSON.stringify(hostname)} { token = ${JSON.stringify(token)} }`]),
    "",
  ].join("\n");
}

/** A recording HTTP proxy to `target`, on a port of its own. */
export async function startRecordingProxy(
  requests: RecordedRequest[],
): Promise<{ url: string; target: { url: string }; close(): Promise<void> }> {
  const target = { url: "" };
  const server: Server = createServer((req, res) => {
    requests.push({
      method: req.method ?? "",
      url: req.url ?? "",
      authorized: req.headers.authorization !== undefined,
      userAgent: req.headers["user-agent"],
    });
    const to = new URL(req.url ?? "/", target.url);
    const upstream = httpRequest(to, { method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      res.writeHead(502);
      res.end(String(err));
    });
    req.pipe(upstream);
  });
  // Idle connections live as long as the Drover server's own (Fastify's 72 s), not Node's 5 s: a
  // client reusing a connection the proxy is closing at that moment gets ECONNRESET, a fault the
  // server behind it does not have.
  server.keepAliveTimeout = 72_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    target,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A stack (server, pool `e2e`, agents on demand) whose TFE organization is `acme` and whose new
 * cloud-block workspaces go to the stack's pool, reached by terraform through the recording proxy.
 */
export async function startTerraformCloud(serverEnv: Record<string, string> = {}): Promise<TerraformCloud> {
  const requests: RecordedRequest[] = [];
  const proxy = await startRecordingProxy(requests);
  const organization = "acme";
  const hostname = "drover.test";
  // The server's URL is its public one, the proxy's, which must forward before the stack's first call.
  const port = await freePort();
  proxy.target.url = `http://127.0.0.1:${port}`;
  const stack = await startStack({
    DROVER_PORT: String(port),
    DROVER_PUBLIC_URL: proxy.url,
    DROVER_TFE_ORGANIZATION: organization,
    DROVER_TFE_POOL: "e2e",
    ...serverEnv,
  });
  const home = join(stack.dir, "tf-home");
  mkdirSync(join(home, ".terraform.d"), { recursive: true });
  const cliConfigFile = join(stack.dir, "cloud.tfrc");
  writeFileSync(cliConfigFile, cliConfig(hostname, proxy.url, stack.server.adminToken));
  const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
    const e: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: home,
      TF_CLI_CONFIG_FILE: cliConfigFile,
      CHECKPOINT_DISABLE: "1",
      TF_IN_AUTOMATION: "1",
      ...extra,
    };
    delete e.TF_INPUT;
    delete e.TF_WORKSPACE;
    return e;
  };
  const spawnTerraform = (args: string[], cwd: string, options: TerraformOptions = {}): TerraformProcess => {
    const child = spawn(options.binary ?? "terraform", args, { cwd, env: env(options.env) });
    let output = "";
    const waiters: { pattern: RegExp; resolve: () => void }[] = [];
    const onData = (d: Buffer) => {
      output += d.toString();
      for (const w of [...waiters])
        if (w.pattern.test(output)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    // Answered when terraform asks, as a user would: nothing is written before its prompt.
    if (options.input === undefined) child.stdin.end();
    else {
      const input = options.input;
      // The prompt ends in colour codes (ESC [ … m) before terraform waits.
      // eslint-disable-next-line no-control-regex -- ESC is what the colour codes start with
      waiters.push({ pattern: /Enter a value:(?:\s|\x1b\[[0-9;]*m)*$/, resolve: () => child.stdin.end(input) });
    }
    const done = new Promise<{ code: number; output: string }>((resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code) => resolve({ code: code ?? 1, output }));
    });
    return {
      child,
      output: () => output,
      done,
      waitFor(pattern, timeoutMs = 60_000) {
        if (pattern.test(output)) return Promise.resolve();
        return new Promise<void>((resolve, reject) => {
          const timer = setTimeout(
            () => reject(new Error(`terraform did not print ${pattern} in ${timeoutMs} ms:\n${output}`)),
            timeoutMs,
          );
          waiters.push({
            pattern,
            resolve: () => {
              clearTimeout(timer);
              resolve();
            },
          });
          void done.then(() => {
            clearTimeout(timer);
            if (!pattern.test(output)) reject(new Error(`terraform exited without printing ${pattern}:\n${output}`));
          });
        });
      },
    };
  };
  return {
    stack,
    hostname,
    organization,
    url: proxy.url,
    requests,
    config: (name, workspaces, files = {}) =>
      writeConfig(stack.dir, name, { "cloud.tf": cloudBlock(hostname, organization, workspaces), ...files }),
    env,
    terraform: (args, cwd, options) => spawnTerraform(args, cwd, options).done,
    spawnTerraform,
    async stop() {
      await stack.stop();
      await proxy.close();
    },
  };
}

/** The path of `name` on PATH, or undefined: for tests that run only where a binary is installed. */
export function onPath(name: string): string | undefined {
  const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", name], { encoding: "utf8" });
  const path = found.stdout.trim();
  return found.status === 0 && path !== "" ? path : undefined;
}

/** A throwaway CA and a server certificate it signed for localhost, drover.test and 127.0.0.1, as files in `dir`. */
export function throwawayCa(dir: string): { caFile: string; certFile: string; keyFile: string } {
  mkdirSync(dir, { recursive: true });
  const f = (name: string) => join(dir, name);
  const openssl = (args: string[]) => {
    const r = spawnSync("openssl", args, { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`openssl ${args[0]} failed: ${r.stderr}`);
  };
  openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=Drover Test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
    "-keyout",
    f("ca-key.pem"),
    "-out",
    f("ca.pem"),
  ]);
  openssl([
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-subj",
    "/CN=localhost",
    "-keyout",
    f("key.pem"),
    "-out",
    f("leaf.csr"),
  ]);
  writeFileSync(
    f("ext.cnf"),
    "subjectAltName=DNS:localhost,DNS:drover.test,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
  );
  openssl([
    "x509",
    "-req",
    "-in",
    f("leaf.csr"),
    "-CA",
    f("ca.pem"),
    "-CAkey",
    f("ca-key.pem"),
    "-CAcreateserial",
    "-out",
    f("cert.pem"),
    "-days",
    "2",
    "-extfile",
    f("ext.cnf"),
  ]);
  return { caFile: f("ca.pem"), certFile: f("cert.pem"), keyFile: f("key.pem") };
}
