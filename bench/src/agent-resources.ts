import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packDir, runToCompletion, startAgentProc } from "./agent-runs.js";
import { adminToken, api, rssMb, sleep, startServerProc } from "./harness.js";
import { type Figure } from "./report.js";

/** Idle RSS of a registered, long-polling agent, beside a bare Node.js process. */
export async function benchAgentIdle(): Promise<Figure[]> {
  const server = await startServerProc();
  try {
    await api(server.url, "POST", "/api/v1/pools", undefined, { name: "idle" });
    const agent = await startAgentProc(server, "idle", "idle-agent");
    await sleep(5000);
    const rss = rssMb(agent.child.pid!);
    await agent.stop();
    const { spawn } = await import("node:child_process");
    const bare = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"]);
    await sleep(1000);
    const bareRss = rssMb(bare.pid!);
    bare.kill();
    return [{ bench: "agent idle", metric: "RSS after 5 s idle", unit: "MB", value: rss, baseline: bareRss, baselineLabel: "empty Node.js process", target: "≤ 80 MB", met: rss <= 80 }];
  } finally {
    await server.stop();
  }
}

/**
 * A run printing 50 MB of numbered lines: throughput from the first to the last byte
 * stored, and a check that every line arrived once and in order.
 */
export async function benchLogStreaming(megabytes = 50): Promise<Figure[]> {
  const server = await startServerProc();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-logs-"));
  try {
    await api(server.url, "POST", "/api/v1/pools", undefined, { name: "logs" });
    await api(server.url, "POST", "/api/v1/workspaces", undefined, { name: "logs", pool: "logs" });
    const agent = await startAgentProc(server, "logs", "log-agent");
    // Lines of 100 bytes: "line 0000001 " + padding; awk is in every image.
    const lines = Math.round((megabytes * 1024 * 1024) / 100);
    writeFileSync(
      join(dir, "main.tf"),
      `resource "terraform_data" "loud" {
  input = timestamp()
  provisioner "local-exec" {
    command = "awk 'BEGIN { for (i = 1; i <= ${lines}; i++) printf \\"line %010d %s\\\\n\\", i, \\"${"x".repeat(83)}\\" }'"
  }
}
`,
    );
    const run = await runToCompletion(server, "logs", await packDir(dir));
    await agent.stop();
    if (run.status !== "applied") throw new Error(`log run ended ${run.status}`);
    // Read the whole apply log back and check order and completeness.
    let offset = 0;
    let expected = 1;
    let carry = "";
    let bytes = 0;
    const readStart = Date.now();
    for (;;) {
      const res = await fetch(`${server.url}/api/v1/runs/${run.id}/logs?phase=apply&offset=${offset}&limit=8388608`, { headers: { authorization: `Bearer ${adminToken}` } });
      const chunk = Buffer.from(await res.arrayBuffer());
      bytes += chunk.length;
      offset = Number(res.headers.get("x-drover-log-offset"));
      const text = carry + chunk.toString("utf8");
      const parts = text.split("\n");
      carry = parts.pop() ?? "";
      for (const l of parts) {
        const m = l.match(/line (\d{10}) /);
        if (!m) continue;
        if (Number(m[1]) !== expected) throw new Error(`log out of order or lost: expected line ${expected}, got ${m[1]}`);
        expected++;
      }
      if (res.headers.get("x-drover-log-complete") === "true" || chunk.length === 0) break;
    }
    if (expected - 1 !== lines) throw new Error(`log incomplete: ${expected - 1} of ${lines} lines`);
    const jobs = await api(server.url, "GET", `/api/v1/runs/${run.id}/jobs`);
    const apply = jobs.items.find((j: { phase: string }) => j.phase === "apply");
    const seconds = (Date.parse(apply.finishedAt) - Date.parse(apply.startedAt)) / 1000;
    const throughput = bytes / (1024 * 1024) / seconds;
    const readThroughput = bytes / (1024 * 1024) / ((Date.now() - readStart) / 1000);
    return [
      {
        bench: `log streaming (${megabytes} MB from local-exec)`,
        metric: "agent → server throughput",
        unit: "MB/s",
        value: throughput,
        baseline: null,
        baselineLabel: "",
        target: "≥ 20 MB/s",
        met: throughput >= 20,
        note: `${lines} lines all present and in order; apply job ${seconds.toFixed(1)} s including terraform; read back at ${readThroughput.toFixed(0)} MB/s`,
      },
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
}
