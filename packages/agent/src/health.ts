import { createServer, type Server } from "node:http";
import { Counter, Gauge, Registry } from "prom-client";

/** The agent's metrics, on its own registry. */
export class AgentMetrics {
  readonly registry = new Registry();
  readonly jobsRunning = new Gauge({ name: "drover_agent_jobs_running", help: "Jobs running on this agent", registers: [this.registry] });
  readonly jobsFinished = new Counter({ name: "drover_agent_jobs_finished_total", help: "Jobs this agent finished", labelNames: ["phase"] as const, registers: [this.registry] });
  readonly pollErrors = new Counter({ name: "drover_agent_poll_errors_total", help: "Failed long-polls", registers: [this.registry] });
}

/** `/healthz`, `/readyz` and `/metrics` on the health port. */
export async function startHealthServer(port: number, metrics: AgentMetrics, status: () => { ready: boolean; state: string; lastActivity: number | null }): Promise<Server> {
  const server = createServer((req, res) => {
    const s = status();
    if (req.url === "/healthz") {
      res.writeHead(s.state === "stopped" ? 503 : 200, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: s.state === "stopped" ? "stopped" : "ok", state: s.state, currentTime: new Date().toISOString(), lastActivity: s.lastActivity ? new Date(s.lastActivity).toISOString() : null }));
    } else if (req.url === "/readyz") {
      res.writeHead(s.ready ? 200 : 503, { "content-type": "application/json" });
      res.end(JSON.stringify({ ready: s.ready }));
    } else if (req.url === "/metrics") {
      void metrics.registry.metrics().then((text) => {
        res.writeHead(200, { "content-type": metrics.registry.contentType });
        res.end(text);
      });
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "0.0.0.0", () => resolve());
  });
  return server;
}
