// Test-side access to tools/kube-test-cluster: its types from the project reference,
// its code from the compiled output (tools/ is not an npm workspace, so no package name).
import { request as httpsRequest } from "node:https";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { spawn, spawnSync } from "node:child_process";
import type * as Ktc from "../../tools/kube-test-cluster/src/index.js";
import { pollWait } from "../support/poll.js";

const moduleUrl = new URL("../../../tools/kube-test-cluster/dist/index.js", import.meta.url);
const ktc = (await import(moduleUrl.href)) as typeof Ktc;

export const startTestCluster = ktc.startTestCluster;
export const annotationOomKill = ktc.annotationOomKill;
export type TestCluster = Ktc.TestCluster;
export type KObject = Ktc.KObject;

/** Short timings so every simulated wait stays well under a second. */
export const fastTimings = {
  imagePullBackoffMs: 150,
  crashLoopBackoffMs: 150,
  configRetryMs: 100,
  podBackoffMs: 100,
  namespaceRetryMs: 20,
};

export interface Reply {
  status: number;
  body: any;
  headers: IncomingMessage["headers"];
}

function open(
  c: TestCluster,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<IncomingMessage> {
  const url = new URL(path, c.url);
  const opts = {
    method,
    headers: { authorization: `Bearer ${c.token}`, ...headers },
    ...(c.caCert ? { ca: c.caCert } : {}),
  };
  return new Promise((resolve, reject) => {
    const req = (url.protocol === "https:" ? httpsRequest : httpRequest)(url, opts, resolve);
    req.on("error", reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** One API call; JSON bodies are parsed. `contentType` picks the patch type for PATCH. */
export async function kube(
  c: TestCluster,
  method: string,
  path: string,
  body?: unknown,
  contentType = "application/json",
): Promise<Reply> {
  const text = body === undefined ? undefined : JSON.stringify(body);
  const res = await open(
    c,
    method,
    path,
    {
      ...(text !== undefined ? { "content-type": contentType, "content-length": String(Buffer.byteLength(text)) } : {}),
      accept: "application/json",
    },
    text,
  );
  const chunks: Buffer[] = [];
  for await (const ch of res) chunks.push(ch as Buffer);
  const raw = Buffer.concat(chunks).toString("utf8");
  let parsed: unknown = raw;
  if ((res.headers["content-type"] ?? "").includes("json")) parsed = JSON.parse(raw);
  return { status: res.statusCode ?? 0, body: parsed, headers: res.headers };
}

export interface WatchStream {
  events: { type: string; object: any }[];
  /** Resolves with the first event (seen or future) matching `pred`. */
  waitFor(
    pred: (e: { type: string; object: any }) => boolean,
    timeoutMs?: number,
  ): Promise<{ type: string; object: any }>;
  ended: Promise<void>;
  close(): void;
}

export async function watch(c: TestCluster, path: string): Promise<WatchStream> {
  const res = await open(c, "GET", path, { accept: "application/json" });
  const events: { type: string; object: any }[] = [];
  const listeners = new Set<() => void>();
  let buf = "";
  res.setEncoding("utf8");
  res.on("data", (d: string) => {
    buf += d;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim() !== "") events.push(JSON.parse(line) as { type: string; object: any });
    }
    for (const l of [...listeners]) l();
  });
  const ended = new Promise<void>((resolve) => res.on("close", () => resolve()));
  return {
    events,
    ended,
    close: () => res.destroy(),
    waitFor(pred, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = (): boolean => {
          const e = events.find(pred);
          if (e) {
            listeners.delete(check);
            clearTimeout(timer);
            resolve(e);
            return true;
          }
          return false;
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(
            new Error(
              `watch ${path}: no matching event in ${timeoutMs} ms; saw ${events.map((e) => `${e.type} ${e.object?.metadata?.name ?? ""}`).join(", ")}`,
            ),
          );
        }, timeoutMs);
        if (!check()) listeners.add(check);
      });
    },
  };
}

/** Polls `get` until `pred` holds (the cluster is in-process, so polling is cheap). */
export async function until<T>(
  what: string,
  get: () => Promise<T>,
  pred: (v: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (let attempt = 0; Date.now() < deadline; attempt++) {
    last = await get();
    if (pred(last)) return last;
    await pollWait(attempt);
  }
  throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(last)?.slice(0, 2000)}`);
}

/** A namespace with a random name, for isolating tests sharing one cluster. */
export async function freshNamespace(c: TestCluster, prefix = "t"): Promise<string> {
  const name = `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
  const r = await kube(c, "POST", "/api/v1/namespaces", { metadata: { name } });
  if (r.status !== 201) throw new Error(`creating namespace: ${JSON.stringify(r.body)}`);
  return name;
}

export function pod(c: TestCluster, ns: string, name: string): Promise<any> {
  return kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${name}`).then((r) => r.body);
}

/** Waits for the Job's single pod and returns it. */
export async function jobPod(
  c: TestCluster,
  ns: string,
  job: string,
  pred: (p: any) => boolean = () => true,
): Promise<any> {
  const list = await until(
    `a pod of job ${job}`,
    () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=job-name%3D${job}`),
    (r) => (r.body.items as any[]).some(pred),
  );
  return (list.body.items as any[]).find(pred);
}

/** Runs kubectl asynchronously (the cluster is served by this very process, so never spawnSync). */
export function kubectl(
  c: TestCluster,
  args: string[],
  input?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawn("kubectl", args, { env: { ...process.env, ...c.kubectlEnv() }, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  child.stdin.end(input ?? "");
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  return new Promise((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    }),
  );
}

export function spawnKubectl(c: TestCluster, args: string[]) {
  return spawn("kubectl", args, { env: { ...process.env, ...c.kubectlEnv() }, stdio: ["ignore", "pipe", "pipe"] });
}

export const hasKubectl = spawnSync("kubectl", ["version", "--client"], { stdio: "ignore" }).status === 0;

/** Polls `check` until it returns something truthy; fails the test naming `what` after `timeoutMs`. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Creates `namespace` and Drover's AgentTask CRD (the file the charts ship) and waits until it is served. */
export async function prepareDroverNamespace(c: TestCluster, namespace: string, crdPath: string): Promise<void> {
  const { parse } = await import("yaml");
  const { readFileSync } = await import("node:fs");
  const ns = await kube(c, "POST", "/api/v1/namespaces", { metadata: { name: namespace } });
  if (ns.status !== 201) throw new Error(`namespace ${namespace}: ${JSON.stringify(ns.body)}`);
  const crd = await kube(
    c,
    "POST",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    parse(readFileSync(crdPath, "utf8")),
  );
  if (crd.status !== 201 && crd.status !== 409) throw new Error(`CRD: ${JSON.stringify(crd.body)}`);
  await eventually(
    "the CRD to be served",
    async () => (await kube(c, "GET", `/apis/drover.dev/v1alpha1/namespaces/${namespace}/agenttasks`)).status === 200,
  );
}
