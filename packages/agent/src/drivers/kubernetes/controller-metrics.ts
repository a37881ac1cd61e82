import { MetricSet, requestSecondsBuckets } from "../../metrics.js";

/** Bucket bounds (seconds) of Job startup: scheduling, image pulls and container start. */
const startupSecondsBuckets = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
/** The controller's series (/metrics, and OTLP's source); `inFlight` counts its unfinished Jobs at each scrape. */
export function controllerMetrics(inFlight: () => number): MetricSet {
  return new MetricSet()
    .define("drover_controller_jobs_in_flight", "gauge", "Kubernetes Jobs of this controller that have not finished", {
      read: inFlight,
    })
    .define("drover_controller_jobs_launched_total", "counter", "Kubernetes Jobs this controller created")
    .define(
      "drover_controller_pod_failures_total",
      "counter",
      "Runs this controller ended errored for a pod-level reason, by reason",
      { labels: ["reason"] },
    )
    .define(
      "drover_controller_watch_errors_total",
      "counter",
      "Failed lists or watches of Jobs and pods (each is retried)",
    )
    .define(
      "drover_controller_errors_total",
      "counter",
      "Errors of this controller by kind (each retried or reported)",
      { labels: ["kind"] },
    )
    .define(
      "drover_controller_heartbeat_duration_seconds",
      "histogram",
      "Round trip of the controller's heartbeats to the server",
      { buckets: requestSecondsBuckets },
    )
    .define(
      "drover_controller_job_startup_latency_seconds",
      "histogram",
      "From the controller creating a Kubernetes Job to it seeing the run's worker container running",
      { buckets: startupSecondsBuckets },
    );
}
