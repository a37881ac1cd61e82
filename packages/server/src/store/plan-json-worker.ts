import { readFileSync } from "node:fs";
import { parentPort } from "node:worker_threads";
import type { PlanSummary } from "@drover/protocol";
import { messageOf } from "@drover/protocol/errors";
import { destroysEverything, planShapeProblem, summarizePlan } from "@drover/protocol/plan";
import { redactJson, secretForms } from "@drover/runtime/redact";

/*
 * The thread that turns an uploaded plan JSON into what is stored (see plan-json.ts): parsing,
 * summarising and redacting a document of up to DROVER_MAX_PLAN_JSON_MB take seconds of CPU
 * and several times its size in memory, none of which may hold the server's event loop. It
 * renders one document per message, for as long as the server keeps it.
 */

/** One document to render: the body (a spooled file, or its bytes) and the sensitive values to redact. */
export interface PlanJsonRequest {
  source: { path: string } | { bytes: Uint8Array };
  sensitiveValues: string[];
}

/** The answer to one request. */
export type PlanJsonReply =
  | { kind: "done"; summary: PlanSummary; destroysAll: boolean; json: Uint8Array }
  | { kind: "invalid_json"; message: string };

const port = parentPort;
if (!port) throw new Error("plan-json-worker.js runs as a worker thread");

function render({ source, sensitiveValues }: PlanJsonRequest): PlanJsonReply {
  const bytes = "path" in source ? readFileSync(source.path) : Buffer.from(source.bytes);
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString("utf8"));
  } catch (err) {
    return { kind: "invalid_json", message: `the plan JSON is not valid JSON (${messageOf(err)})` };
  }
  // `terraform show -json` prints an object; the plan's other readers (terraform's own show) need one.
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return { kind: "invalid_json", message: "the plan JSON is not a JSON object, as `terraform show -json` prints" };
  const problem = planShapeProblem(parsed);
  if (problem !== undefined)
    return { kind: "invalid_json", message: `the plan JSON is not as \`terraform show -json\` prints it: ${problem}` };
  const redacted = JSON.stringify(redactJson(parsed, secretForms(sensitiveValues)));
  // TextEncoder gives the bytes a buffer of their own (small Buffers share a pool), so it can be moved, not copied.
  return {
    kind: "done",
    summary: summarizePlan(parsed),
    destroysAll: destroysEverything(parsed),
    json: new TextEncoder().encode(redacted),
  };
}

port.on("message", (request: PlanJsonRequest) => {
  const reply = render(request);
  port.postMessage(reply, reply.kind === "done" ? [reply.json.buffer as ArrayBuffer] : []);
});
