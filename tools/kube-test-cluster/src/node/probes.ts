/**
 * Container probes as kubelet runs them: httpGet (success is a status in [200, 400)),
 * tcpSocket (a connection is accepted) and exec (exit code 0, run inside the
 * container's mount namespace and root as its user). httpGet and tcpSocket connect to the
 * pod's IP unless they name a `host`, so a server bound to the other IP family is refused as
 * on a single-stack cluster. Timing fields are in "probe
 * seconds", whose length the cluster's `probeSecondMs` timing sets, so tests can run a
 * chart's real probe settings quickly.
 */
import { spawn } from "node:child_process";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { connect, isIPv6 } from "node:net";
import type { JsonObject } from "../api/types.js";
import { isObject } from "../api/types.js";

export interface ProbeResult {
  ok: boolean;
  /** Why it failed, worded as kubelet's Unhealthy events word it. */
  message: string;
}

/** The probe's numbers with Kubernetes' defaults. */
export interface ProbeTiming {
  initialDelaySeconds: number;
  periodSeconds: number;
  timeoutSeconds: number;
  successThreshold: number;
  failureThreshold: number;
}

export function probeTiming(probe: JsonObject): ProbeTiming {
  const n = (k: string, d: number): number => (typeof probe[k] === "number" ? (probe[k] as number) : d);
  return {
    initialDelaySeconds: n("initialDelaySeconds", 0),
    periodSeconds: n("periodSeconds", 10),
    timeoutSeconds: n("timeoutSeconds", 1),
    successThreshold: n("successThreshold", 1),
    failureThreshold: n("failureThreshold", 3),
  };
}

export interface ExecTarget {
  /** argv that runs `command` inside the container (as its user, with its environment). */
  wrap(command: string[]): { argv: string[]; env: Record<string, string> };
}

/** Resolves a named port against the container's `ports`. */
function portOf(value: unknown, container: JsonObject): number | undefined {
  if (typeof value === "number") return value;
  if (typeof value === "string") {
    if (/^\d+$/.test(value)) return Number(value);
    const ports = Array.isArray(container.ports) ? container.ports.filter(isObject) : [];
    const p = ports.find((x) => x.name === value);
    return typeof p?.containerPort === "number" ? p.containerPort : undefined;
  }
  return undefined;
}

/** `host:port` as Go's net.JoinHostPort writes it (kubelet's messages and URLs). */
function hostPort(host: string, port: number): string {
  return isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

function httpProbe(h: JsonObject, container: JsonObject, timeoutMs: number, podIP: string): Promise<ProbeResult> {
  const port = portOf(h.port, container);
  if (port === undefined)
    return Promise.resolve({ ok: false, message: `Probe failed: invalid port ${JSON.stringify(h.port)}` });
  const https = String(h.scheme ?? "HTTP").toUpperCase() === "HTTPS";
  const host = typeof h.host === "string" && h.host !== "" ? h.host : podIP;
  const path = typeof h.path === "string" && h.path !== "" ? h.path : "/";
  const headers: Record<string, string> = { "user-agent": "kube-probe/1.32", accept: "*/*" };
  for (const x of (Array.isArray(h.httpHeaders) ? h.httpHeaders : []).filter(isObject))
    headers[String(x.name).toLowerCase()] = String(x.value ?? "");
  const url = `${https ? "https" : "http"}://${hostPort(host, port)}${path.startsWith("/") ? path : `/${path}`}`;
  return new Promise((resolve) => {
    const req = (https ? httpsRequest : httpRequest)(
      url,
      { method: "GET", headers, timeout: timeoutMs, ...(https ? { rejectUnauthorized: false } : {}) },
      (res) => {
        const code = res.statusCode ?? 0;
        res.resume();
        res.on("end", () =>
          resolve(
            code >= 200 && code < 400
              ? { ok: true, message: "" }
              : { ok: false, message: `HTTP probe failed with statuscode: ${code}` },
          ),
        );
        res.on("error", () => resolve({ ok: false, message: `Get "${url}": response ended early` }));
      },
    );
    req.on("timeout", () => {
      req.destroy();
      resolve({
        ok: false,
        message: `Get "${url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`,
      });
    });
    req.on("error", (e: NodeJS.ErrnoException) =>
      resolve({
        ok: false,
        message: `Get "${url}": dial tcp ${hostPort(host, port)}: connect: ${e.code === "ECONNREFUSED" ? "connection refused" : e.message}`,
      }),
    );
    req.end();
  });
}

function tcpProbe(t: JsonObject, container: JsonObject, timeoutMs: number, podIP: string): Promise<ProbeResult> {
  const port = portOf(t.port, container);
  const host = typeof t.host === "string" && t.host !== "" ? t.host : podIP;
  if (port === undefined)
    return Promise.resolve({ ok: false, message: `Probe failed: invalid port ${JSON.stringify(t.port)}` });
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: timeoutMs });
    s.on("connect", () => {
      s.destroy();
      resolve({ ok: true, message: "" });
    });
    s.on("timeout", () => {
      s.destroy();
      resolve({ ok: false, message: `dial tcp ${hostPort(host, port)}: i/o timeout` });
    });
    s.on("error", (e: NodeJS.ErrnoException) =>
      resolve({
        ok: false,
        message: `dial tcp ${hostPort(host, port)}: connect: ${e.code === "ECONNREFUSED" ? "connection refused" : e.message}`,
      }),
    );
  });
}

function execProbe(e: JsonObject, target: ExecTarget, timeoutMs: number): Promise<ProbeResult> {
  const command = Array.isArray(e.command) ? e.command.map(String) : [];
  if (command.length === 0) return Promise.resolve({ ok: false, message: "exec probe has no command" });
  const { argv, env } = target.wrap(command);
  return new Promise((resolve) => {
    const child = spawn(argv[0] ?? "", argv.slice(1), { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (err) => {
      clearTimeout(timer);
      resolve({ ok: false, message: err.message });
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (signal) resolve({ ok: false, message: `command ${JSON.stringify(command.join(" "))} timed out` });
      else
        resolve(
          code === 0
            ? { ok: true, message: "" }
            : {
                ok: false,
                message:
                  out.trim() === ""
                    ? `command ${JSON.stringify(command.join(" "))} exited with ${String(code)}`
                    : out.trim(),
              },
        );
    });
  });
}

/** Runs a probe once against the pod at `podIP`. */
export function runProbe(
  probe: JsonObject,
  container: JsonObject,
  target: ExecTarget,
  timeoutMs: number,
  podIP: string,
): Promise<ProbeResult> {
  if (isObject(probe.httpGet)) return httpProbe(probe.httpGet, container, timeoutMs, podIP);
  if (isObject(probe.tcpSocket)) return tcpProbe(probe.tcpSocket, container, timeoutMs, podIP);
  if (isObject(probe.exec)) return execProbe(probe.exec, target, timeoutMs);
  return Promise.resolve({
    ok: false,
    message: "probe handler not supported by the test cluster (httpGet, tcpSocket and exec are)",
  });
}
