import { appendFileSync, writeFileSync } from "node:fs";
import { createRequire, register } from "node:module";
import { inIdleHeapMode } from "@drover/agent/heap-mode";

/*
 * Preload (`NODE_OPTIONS=--import …/lean-agent-recorder.js`) of the lean-agent test: records
 * which modules a `drover` process loads. ESM loads (every Drover, zod and OpenTelemetry file)
 * come from a loader hook; CommonJS files required from CommonJS (undici's, pino's) never pass
 * the hook in Node 20, so SIGUSR2 adds require's cache and the heap mode, then writes
 * `<log>.done` (with the Node built-ins loaded and the protocol's lazy schemas built, protocol/lazy-schema.ts). The hook's loader thread costs memory: this is for the module set, not for RSS.
 */
const log = process.env.LEAN_AGENT_MODULE_LOG;
if (log) {
  // LEAN_AGENT_HOOKS=0: CommonJS files and built-ins only. The hooks' loader thread loads Node's
  // worker_threads, so a test of whether the agent loads it runs without them.
  if (process.env.LEAN_AGENT_HOOKS !== "0") register(new URL("./lean-agent-hooks.js", import.meta.url));
  const require = createRequire(import.meta.url);
  // Who first required Node's crypto (the agent bundle's stand-in requires it on first use): an
  // idle agent may load it only to compute its process tag, when another agent's job runs on the host.
  const cjs = require("node:module") as { _load: (id: string, ...rest: unknown[]) => unknown };
  const load = cjs._load;
  let cryptoLoadedBy: string | undefined;
  cjs._load = function (this: unknown, id: string, ...rest: unknown[]) {
    if (cryptoLoadedBy === undefined && /^(node:)?crypto$/.test(id)) {
      const limit = Error.stackTraceLimit;
      Error.stackTraceLimit = Infinity;
      cryptoLoadedBy = new Error("crypto required").stack;
      Error.stackTraceLimit = limit;
    }
    return load.call(this, id, ...rest);
  };
  let dumps = 0;
  process.on("SIGUSR2", () => {
    appendFileSync(
      log,
      Object.keys(require.cache)
        .map((path) => `file://${path}\n`)
        .join(""),
    );
    writeFileSync(
      `${log}.done`,
      JSON.stringify({
        dump: ++dumps,
        idleHeapMode: inIdleHeapMode(),
        builtins: (process as unknown as { moduleLoadList: string[] }).moduleLoadList
          .filter((m) => m.startsWith("NativeModule "))
          .map((m) => m.slice("NativeModule ".length)),
        cryptoLoadedBy,
        lazySchemas: [
          ...((globalThis as Record<symbol, string[] | undefined>)[Symbol.for("drover.builtLazySchemas")] ?? []),
        ],
      }),
    );
  });
}
