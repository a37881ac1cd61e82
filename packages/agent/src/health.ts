import { createServer, type Server } from "node:http";

/**
 * The agent's three series in Prometheus' text format, written directly: prom-client costs an
 * idle agent ~12 MB for them (docs/decisions/0004-agent-metrics-without-prom-client.md).
 */
export class AgentMetrics {
  static readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private running = 0;
  private readonly finished = new Map<string, number>();
  private pollErrorCount = 0;

  readonly jobsRunning = { set: (n: number) => void (this.running = n) };
  readonly jobsFinished = { inc: (labels: { phase: string }) => void this.finished.set(labels.phase, (this.finished.get(labels.phase) ?? 0) + 1) };
  readonly pollErrors = { inc: () => void this.pollErrorCount++ };

  /** The exposition `/metrics` serves. */
  render(): string {
    const finished = [...this.finished].map(([phase, n]) => `drover_agent_jobs_finished_total{phase="${phase}"} ${n}\n`).join("");
    return (
      "# HELP drover_agent_jobs_running Jobs running on this agent\n# TYPE drover_agent_jobs_running gauge\n" +
      `drover_agent_jobs_running ${this.running}\n` +
      "# HELP drover_agent_jobs_finished_total Jobs this agent finished\n# TYPE drover_agent_jobs_finished_total counter\n" +
      finished +
      "# HELP drover_agent_poll_errors_total Failed long-polls\n# TYPE drover_agent_poll_errors_total counter\n" +
      `drover_agent_poll_errors_total ${this.pollErrorCount}\n`
    );
  }
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
      res.writeHead(200, { "content-type": AgentMetrics.contentType });
      res.end(metrics.render());
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
