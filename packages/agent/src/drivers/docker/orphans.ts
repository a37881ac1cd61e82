import { messageOf } from "@drover/protocol";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { AgentClient } from "../../session/client.js";
import { dockerLabels, jobsDirName, type JobRecord } from "./container-spec.js";
import type { DockerEngine } from "./engine-api.js";

/** The reason a run gets when its agent restarted under it. */
export const restartedReason =
  "the agent restarted while the run was in progress: its container was removed and the run cannot be resumed";

/**
 * Before a restarted docker-driver agent takes work: removes every container an earlier
 * process of it left (found by its agent-tag label, running or not), and ends each job whose
 * directory is still in the data dir as errored with the reason — its container is gone and
 * nothing can resume it. A job the server already ended elsewhere (lease expired) is left as
 * the server has it. Returns how many jobs were ended.
 */
export async function reapDockerOrphans(
  engine: DockerEngine,
  dataDir: string,
  agentTag: string,
  caCertPem: string | undefined,
  log: Logger,
): Promise<number> {
  for (const c of await engine.list([`${dockerLabels.agentTag}=${agentTag}`])) {
    await engine.remove(c.Id);
    log.warn(
      { container: c.Id.slice(0, 12), run: c.Labels?.[dockerLabels.runId], job: c.Labels?.[dockerLabels.jobId] },
      "removed a run container an earlier process of this agent left behind",
    );
  }
  const base = join(dataDir, jobsDirName);
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return 0;
  }
  let ended = 0;
  for (const name of names) {
    const dir = join(base, name);
    try {
      const record = JSON.parse(readFileSync(join(dir, "job.json"), "utf8")) as JobRecord;
      const job = new AgentClient(record.url, caCertPem).job(record.jobId, record.jobToken);
      await job.finish("errored", restartedReason, AbortSignal.timeout(30_000));
      ended++;
      log.warn({ job: record.jobId, run: record.runId }, `ended an orphaned run: ${restartedReason}`);
    } catch (err) {
      log.info(
        { dir: name, err: messageOf(err) },
        "an orphaned job's directory could not end its run (the server may have ended it already); removing it",
      );
    }
    rmSync(dir, { recursive: true, force: true });
  }
  return ended;
}
