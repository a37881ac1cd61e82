import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { eventually } from "../support/fault-runs.js";
import type { Proc } from "../support/processes.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import { routes } from "@drover/protocol";

// SPEC §8 (idle agent ≤ 55 MB) holds only while an idle agent loads nothing it does not use
// (decision 0031): these tests fail when a change makes one of the lazily loaded parts load at
// start again, which the idle-agent bench would only show as a few MB more.

/** Packages and files an idle local agent must not load, each with where it belongs instead. */
const lazy: Array<[RegExp, string]> = [
  [
    /\/node_modules\/undici\/index\.js$/,
    "undici's index (fetch, WebSocket, mocks…): the agent loads its two files through protocol/transport.ts",
  ],
  [/\/node_modules\/@opentelemetry\//, "OpenTelemetry: only with DROVER_AGENT_OTLP_ENDPOINT"],
  [/\/node_modules\/@kubernetes\//, "the Kubernetes client: job mode and the pod-annotator only"],
  [
    /\/node_modules\/(tar|minizlib|openpgp)\//,
    "archive and signature code: when a job extracts a configuration or fetches an engine",
  ],
  [/\/node_modules\/(fastify|kysely|better-sqlite3|pg)\//, "server code: `drover server` only"],
  [/\/packages\/server\//, "the server package: `drover server` only"],
  [
    /\/node_modules\/thread-stream\//,
    "pino's transports, which the agent configures none of: the bundle's stand-in loads it on first use (scripts/bundle-agent.mjs)",
  ],
];

/** Node modules an idle agent must not load (~0.2–0.3 MB each), each with where it loads instead. */
const lazyBuiltins: Array<[string, string]> = [
  [
    "child_process",
    "the first step a job starts (agent/process.ts); commander's stand-in in the bundle (scripts/bundle-agent.mjs)",
  ],
  ["zlib", "the first archive checked or unpacked (protocol/archive.ts, agent/providers/zip.ts)"],
  ["worker_threads", "pino's stand-in in the bundle (scripts/bundle-agent.mjs): pino needs only isMainThread"],
];

/**
 * The protocol's schemas and routes an idle agent may build (protocol/lazy-schema.ts): those of
 * registering, heartbeating and polling. Any other built at idle is ~2-3 KB of heap per schema
 * that only a job, the server or a user command uses.
 */
const idleSchemas = new Set([
  ...["routes.register", "registerResponseSchema"],
  ...["routes.agentHeartbeat", "agentHeartbeatResponseSchema"],
  ...["routes.pollJob", "pollResponseSchema", "jobAssignmentSchema", "phaseSchema", "engineSchema"],
]);

const recorder = new URL("../support/lean-agent-recorder.js", import.meta.url).href;

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack.stop();
});

/** Starts an agent under the recorder and returns the modules it has loaded once registered, and its heap mode. */
async function idleModules(
  name: string,
  env: Record<string, string> = {},
): Promise<{
  agent: Proc;
  modules: string[];
  idleHeapMode: boolean;
  builtins: string[];
  lazySchemas: string[];
  cryptoLoadedBy?: string;
  log: string;
}> {
  const log = join(stack.dir, `${name}-modules.log`);
  const agent = await stack.startAgent(name, {
    NODE_OPTIONS: `--import ${recorder}`,
    LEAN_AGENT_MODULE_LOG: log,
    ...env,
  });
  await agent.waitFor(/"msg":"registered"/);
  return { agent, log, ...(await snapshot(agent, log)) };
}

async function snapshot(
  agent: Proc,
  log: string,
): Promise<{
  modules: string[];
  idleHeapMode: boolean;
  builtins: string[];
  lazySchemas: string[];
  cryptoLoadedBy?: string;
}> {
  const done = `${log}.done`;
  const before = existsSync(done) ? readFileSync(done, "utf8") : undefined;
  agent.child.kill("SIGUSR2");
  const state = await eventually("the recorder's dump", async () => {
    if (!existsSync(done)) return undefined;
    const text = readFileSync(done, "utf8");
    return text !== before || before === undefined
      ? (JSON.parse(text) as {
          idleHeapMode: boolean;
          builtins: string[];
          lazySchemas: string[];
          cryptoLoadedBy?: string;
        })
      : undefined;
  });
  return {
    modules: [...new Set(readFileSync(log, "utf8").split("\n").filter(Boolean))],
    idleHeapMode: state.idleHeapMode,
    builtins: state.builtins,
    lazySchemas: state.lazySchemas,
    cryptoLoadedBy: state.cryptoLoadedBy,
  };
}

test("an idle local agent loads none of the parts it loads lazily, and runs in idle heap mode", async () => {
  const { agent, modules, idleHeapMode, builtins } = await idleModules("lean");
  try {
    assert.ok(
      modules.some((m) => m.includes("/node_modules/undici/lib/dispatcher/env-http-proxy-agent.js")),
      "the recorder sees CommonJS files (undici's agent)",
    );
    assert.ok(
      modules.some((m) => m.endsWith("/packages/cli/dist/agent-bundle/program.js")),
      "the recorder sees ESM files (the agent bundle)",
    );
    for (const [pattern, why] of lazy) {
      const loaded = modules.filter((m) => pattern.test(m));
      assert.deepEqual(loaded, [], `an idle agent loaded ${loaded.slice(0, 3).join(", ")}: ${why}`);
    }
    // Decision 0037: the agent runs from its bundle, whose sources are one-byte strings in V8 and
    // hold none of zod's locales.
    const unbundled = modules.filter(
      (m) =>
        /\/packages\/(agent|protocol|cli)\/dist\/src\/|\/node_modules\/(zod|commander|pino)\//.test(m) &&
        !/\/(cli\/dist\/src\/main|agent\/dist\/src\/heap-mode)\.js$/.test(m),
    );
    assert.deepEqual(
      unbundled,
      [],
      `an idle agent loaded files the agent bundle holds (scripts/bundle-agent.mjs): ${unbundled.slice(0, 3).join(", ")}`,
    );
    // An ESM import of node:tls computes Node's root CAs (agent/root-certificates.ts).
    assert.deepEqual(
      modules.filter((m) => m === "node:tls" || m === "node:https"),
      [],
      "an idle agent imported node:tls as ESM",
    );
    // undici's HTTP/2 client gets a stand-in for node:http2 (protocol/transport.ts).
    assert.deepEqual(
      builtins.filter((m) => m.includes("http2")),
      [],
      "an idle agent loaded Node's http2",
    );
    // The heartbeat times itself with process.hrtime: the `performance` global loads perf_hooks.
    assert.deepEqual(
      builtins.filter((m) => m === "perf_hooks"),
      [],
      "an idle agent loaded Node's perf_hooks",
    );
    for (const file of modules.filter((m) => m.includes("/packages/cli/dist/agent-bundle/"))) {
      const text = readFileSync(fileURLToPath(file), "utf8");
      assert.doesNotMatch(text, /[^\t\n\r\x20-\x7e]/, `${file} holds non-ASCII text: V8 keeps it as a two-byte string`);
      assert.ok(!text.includes("Zeichen") && !text.includes("caracteres"), `${file} holds zod's locales`);
      // Every one of zod's JSON Schema files names the draft it writes or reads; the bundle's stubs do not.
      assert.ok(!text.includes("draft-2020-12"), `${file} holds zod's JSON Schema code, which the agent never runs`);
      // Without esbuild's keepNames, whose `__name` gives every closure a property store (scripts/bundle-agent.mjs).
      assert.ok(!text.includes("__name("), `${file} is built with esbuild's keepNames`);
    }
    assert.equal(idleHeapMode, true, "`drover agent run` starts in idle heap mode");
  } finally {
    await agent.stop("SIGTERM");
  }
});

test("an idle local agent loads none of Node's modules it needs only for a job or a transport", async () => {
  // Without the recorder's loader hooks, whose thread loads worker_threads itself.
  // Polls that return at once (no job) and the first heartbeat: the idle loop has run every call it makes.
  const { agent, log } = await idleModules("lean-builtins", {
    LEAN_AGENT_HOOKS: "0",
    DROVER_AGENT_POLL_WAIT_MS: "100",
  });
  try {
    const { builtins, lazySchemas, cryptoLoadedBy } = await eventually(
      "an idle agent that has heartbeated and polled",
      async () => {
        const state = await snapshot(agent, log);
        return ["routes.agentHeartbeat", "pollResponseSchema"].every((name) => state.lazySchemas.includes(name))
          ? state
          : undefined;
      },
    );
    assert.ok(builtins.includes("fs"), "the recorder lists Node's built-ins");
    for (const [name, where] of lazyBuiltins)
      assert.deepEqual(
        builtins.filter((m) => m === name),
        [],
        `an idle agent loaded Node's ${name}: it belongs to ${where}`,
      );
    // Node's crypto (~0.75 MB) loads on the first hash or random draw (the bundle's stand-in,
    // scripts/bundle-agent.mjs). At start the agent hashes its process tag only when some process
    // on the host carries a job's tag (agent/orphans.ts): another test's job may, so that one
    // caller is allowed; any other is an idle agent drawing or hashing what only a job needs.
    if (builtins.includes("crypto"))
      assert.match(
        cryptoLoadedBy ?? "(loaded without require: an ESM import?)",
        /\bagentTag\b[^]*\breapOrphans\b/,
        "an idle agent loaded Node's crypto other than for its process tag",
      );
    const extra = lazySchemas.filter((name) => !idleSchemas.has(name));
    assert.deepEqual(
      extra,
      [],
      `an idle agent built schemas it does not use (protocol/lazy-schema.ts): ${extra.join(", ")}`,
    );
  } finally {
    await agent.stop("SIGTERM");
  }
});

test("with an OTLP endpoint set the exporter loads, and a job takes the agent out of idle heap mode", async () => {
  // A port nothing listens on: the exporter starts without connecting; it exports every 60 s.
  const { agent, log } = await idleModules("lean-otlp", { DROVER_AGENT_OTLP_ENDPOINT: "http://127.0.0.1:9" });
  try {
    // The agent starts the exporter after it logs "registered": wait for its modules.
    await eventually("the OTLP exporter loaded when an endpoint is set", async () =>
      (await snapshot(agent, log)).modules.some((m) => m.includes("/node_modules/@opentelemetry/sdk-metrics/"))
        ? true
        : undefined,
    );
    const dir = writeConfig(stack.dir, "lean-job", { "main.tf": 'output "x" {\n  value = "y"\n}\n' });
    await stack.server.api(routes.createWorkspace, { body: { name: "lean", pool: stack.pool } });
    const runId = await stack.startRun(dir, "lean", ["--auto-apply"]);
    await stack.waitForRun(runId, ["applied"]);
    const afterJob = await snapshot(agent, log);
    assert.equal(afterJob.idleHeapMode, false, "the first job ends idle heap mode");
    // What an idle agent leaves unloaded loads when a job needs it: the configuration's archive, terraform's processes.
    for (const name of ["child_process", "zlib"])
      assert.ok(afterJob.builtins.includes(name), `a job loaded Node's ${name}`);
  } finally {
    await agent.stop("SIGTERM");
  }
});
