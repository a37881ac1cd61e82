import { createServer, type Server } from "node:http";
import { DroverError, messageOf } from "@drover/protocol";

/** What a long-running drover process says about itself on its health port. */
export interface HealthReport {
  /**
   * False only when the process cannot do its work any more (stopped, fatal). An unreachable
   * Drover server or API server is not that: restarting would not help, so liveness holds.
   */
  live: boolean;
  /** Registered (where the process registers) and its watches synced: it can take work. */
  ready: boolean;
  /** Extra fields of the /healthz and /readyz bodies. */
  details?: Record<string, unknown>;
}

/** The process behind a health server: its state and its metrics exposition. */
export interface HealthSource {
  health(): HealthReport;
  /** The Prometheus exposition of the process's series. */
  metrics(): Promise<string>;
}

/**
 * `/healthz` (liveness), `/readyz` (readiness) and `/metrics` on `port`, for every
 * long-running drover process (agent, controller, pod worker, node worker). Without an
 * `address` it listens on every interface of both families (`::` with IPv4-mapped
 * addresses, or 0.0.0.0 where the kernel has no IPv6): the kubelet probes the pod's IP,
 * which is an IPv6 address on single-stack IPv6 clusters.
 */
export async function startHealthServer(port: number, source: HealthSource, address?: string): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path === "/healthz" || path === "/readyz") {
      const h = source.health();
      const ok = path === "/healthz" ? h.live : h.ready;
      const status = path === "/healthz" ? (h.live ? "ok" : "down") : h.ready ? "ready" : "not ready";
      res.writeHead(ok ? 200 : 503, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ status, live: h.live, ready: h.ready, currentTime: new Date().toISOString(), ...h.details }),
      );
    } else if (path === "/metrics") {
      source.metrics().then(
        (text) => {
          res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
          res.end(text);
        },
        (err: unknown) => {
          res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
          res.end(`cannot collect the metrics: ${messageOf(err)}\n`);
        },
      );
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        err.code === "EADDRINUSE"
          ? new DroverError("invalid_setting", `the health port ${port} is in use`, {
              hint: "Choose another with --health-port (DROVER_AGENT_HEALTH_PORT), or 0 for none.",
              cause: err,
            })
          : err,
      ),
    );
    const listening = () => {
      server.off("error", reject);
      resolve();
    };
    if (address === undefined) server.listen(port, listening);
    else server.listen(port, address, listening);
  });
  return server;
}

/** Closes a health server; resolves once it has stopped listening. */
export function closeHealthServer(server: Server | undefined): Promise<void> {
  if (!server) return Promise.resolve();
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * Runs `work` with the health server of `source` on `port` (none when `port` is 0) and
 * `address` (see startHealthServer), closing it once `work` settles; resolves or rejects as `work` does.
 */
export async function servingHealth<T>(
  port: number,
  address: string | undefined,
  source: HealthSource,
  work: () => Promise<T>,
): Promise<T> {
  const server = port > 0 ? await startHealthServer(port, source, address) : undefined;
  try {
    return await work();
  } finally {
    await closeHealthServer(server);
  }
}
