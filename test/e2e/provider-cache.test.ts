import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, spawnDrover } from "../support/processes.js";
import { providerConfig, startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { testRunUid } from "../support/run-users.js";
import { routes } from "@drover/protocol";

let stack: Stack;
let registry: TestRegistry;
/** Reachable (0711) by a run user, like /var/lib/drover. */
let home: string;
const three = [
  { type: "alpha", version: "1.0.0" },
  { type: "beta", version: "2.1.0" },
  { type: "gamma", version: "0.3.0" },
];

before(async () => {
  stack = await startStack();
  registry = await startProviderRegistry(
    three.map((p) => ({ type: p.type, versions: [p.version] })),
    [{ name: "thing", versions: ["1.0.0"], files: { "main.tf": 'output "v" { value = "thing-VERSION" }\n' } }],
  );
  home = mkdtempSync(join(tmpdir(), "drover-pcache-"));
  chmodSync(home, 0o711);
});
after(async () => {
  await stack.stop();
  await registry.close();
  rmSync(home, { recursive: true, force: true });
});

function lockedH1(text: string, type: string): string[] {
  const block =
    new RegExp(`provider "${registry.source(type).replace(/[.]/g, "\\.")}" \\{([\\s\\S]*?)\\n\\}`).exec(text)?.[1] ??
    "";
  return [...block.matchAll(/"(h1:[^"]+)"/g)].map((m) => m[1] as string);
}

async function metric(port: number, name: string): Promise<number> {
  // eslint-disable-next-line no-restricted-globals -- the agent's /metrics, not the server
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return Number(new RegExp(`^${name}\\{cache="providers"\\} (\\d+)$`, "m").exec(text)?.[1] ?? "NaN");
}

test("5 concurrent runs needing the same 3 providers on one agent: all planned with correct lock files, each provider downloaded once", async () => {
  const agentHome = join(home, "shared");
  const lockOut = join(home, "locks");
  const hooks = join(home, "hooks");
  mkdirSync(lockOut, { recursive: true, mode: 0o777 });
  chmodSync(lockOut, 0o777);
  mkdirSync(hooks, { recursive: true });
  // The post-plan hook keeps each run's lock file (terraform wrote it during init).
  writeFileSync(join(hooks, "post-plan"), `#!/bin/sh\ncp .terraform.lock.hcl "${lockOut}/$DROVER_RUN_ID.hcl"\n`, {
    mode: 0o755,
  });
  const port = await freePort();
  await stack.startAgent("pcache", {
    DROVER_AGENT_CONCURRENCY: "5",
    DROVER_CA_CERT: registry.caFile,
    DROVER_AGENT_HOOKS_DIR: hooks,
    DROVER_AGENT_DATA_DIR: join(agentHome, "data"),
    DROVER_AGENT_CACHE_DIR: join(agentHome, "cache"),
    DROVER_AGENT_HEALTH_PORT: String(port),
  });
  const rounds = Number(process.env.DROVER_PROVIDER_CACHE_ROUNDS ?? "1");
  for (let round = 0; round < rounds; round++) {
    const runs = await Promise.all(
      // As many as the agent runs at once: every init races for the empty cache (the store's races
      // showed at this width; test/agent/provider-cache.test.ts races 12 inits without the server).
      Array.from({ length: 5 }, async (_, i) => {
        const ws = `pc-${round}-${i}`;
        await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool, autoApply: true } });
        const dir = writeConfig(stack.dir, ws, { "main.tf": providerConfig(registry, three, ws) });
        // Plans start every provider (schemas, plan); applies are covered below and in runs.test.
        return stack.startRun(dir, ws, ["--plan-only"]);
      }),
    );
    for (const runId of runs) {
      const run = await stack.waitForRun(runId, ["planned", "planned_and_finished", "errored", "failed"], 300_000);
      const log = await runLog(stack.server, runId, "plan");
      assert.match(run.status, /^planned/, `${run.errorMessage}\n${log}`);
      assert.match(log, /providers from the agent's cache: /);
      const lock = readFileSync(join(lockOut, `${runId}.hcl`), "utf8");
      for (const p of three)
        assert.deepEqual(
          lockedH1(lock, p.type),
          [registry.h1(p.type, p.version)],
          `run ${runId}: lock file of ${p.type}`,
        );
    }
  }
  for (const p of three)
    assert.equal(registry.downloads.get(registry.archiveName(p.type, p.version)), 1, `${p.type} downloaded once`);
  assert.equal(await metric(port, "drover_agent_cache_misses_total"), 3);
  assert.equal(await metric(port, "drover_agent_cache_hits_total"), 5 * rounds * 3 - 3);
  assert.ok((await metric(port, "drover_agent_cache_bytes")) > 0);
  assert.equal(await metric(port, "drover_agent_cache_evictions_total"), 0);
  // DROVER_AGENT_MODULE_CACHE_ENABLED is false by default: no module cache at all.
  assert.ok(!existsSync(join(agentHome, "cache", "modules")));
});

test(
  "a run cannot write into the provider or module cache: its provisioner is refused by the filesystem",
  { skip: process.getuid?.() !== 0 ? "only root can start runs as another user" : false },
  async () => {
    await stack.server.api(routes.createPool, { body: { name: "pcache-ro" } });
    const token = (
      await stack.server.api(routes.createPoolToken, { params: { pool: "pcache-ro" }, body: { description: "ro" } })
    ).body.token as string;
    const agentHome = join(home, "ro");
    const cache = join(agentHome, "cache");
    writeFileSync(join(home, "terraformrc"), "", { mode: 0o644 });
    const runUid = testRunUid();
    const agent = spawnDrover(["agent", "run"], {
      ...stack.baseEnv,
      TF_CLI_CONFIG_FILE: join(home, "terraformrc"),
      DROVER_TOKEN: token,
      DROVER_AGENT_NAME: "pcache-ro",
      DROVER_CA_CERT: registry.caFile,
      DROVER_AGENT_DATA_DIR: join(agentHome, "data"),
      DROVER_AGENT_CACHE_DIR: cache,
      DROVER_AGENT_HEALTH_PORT: "0",
      DROVER_AGENT_RUN_AS_USER: String(runUid),
      DROVER_AGENT_MODULE_CACHE_ENABLED: "true",
    });
    try {
      await agent.waitFor(/registered/);
      await stack.server.api(routes.createWorkspace, {
        body: { name: "pcache-ro", pool: "pcache-ro", autoApply: true },
      });
      const entry = join(cache, "providers", "mirror", registry.host, "drover", "alpha", "1.0.0", "linux_amd64");
      const binary = join(entry, "terraform-provider-alpha_v1.0.0");
      const moduleFile = join(
        cache,
        "modules",
        "entries",
        registry.host,
        "drover",
        "thing",
        "null",
        "1.0.0",
        "main.tf",
      );
      const attempts = [
        `echo planted >> ${binary}`,
        `touch ${entry}/planted`,
        `mkdir ${join(cache, "providers", "mirror", "planted")}`,
        `chmod u+w ${binary}`,
        `echo planted >> ${moduleFile}`,
        `echo planted >> .terraform/modules/m/main.tf`,
      ];
      const command = attempts
        .map((c, i) => `( ${c} ) 2>/dev/null && echo WRITE${i}:ok || echo WRITE${i}:refused`)
        .join("; ");
      const dir = writeConfig(stack.dir, "pcache-ro", {
        "main.tf": `${providerConfig(registry, three.slice(0, 1), "ro")}\nmodule "m" {\n  source  = "${registry.host}/drover/thing/null"\n  version = "1.0.0"\n}\noutput "m" { value = module.m.v }\nresource "alpha_thing" "probe" {\n  input = "probe"\n  provisioner "local-exec" {\n    command = ${JSON.stringify(command)}\n  }\n}\n`,
      });
      const runId = await stack.startRun(dir, "pcache-ro");
      const run = await stack.waitForRun(runId, ["applied", "errored", "failed"], 120_000);
      const log = await runLog(stack.server, runId, "apply");
      assert.equal(run.status, "applied", `${run.errorMessage}\n${log}`);
      assert.match(await runLog(stack.server, runId, "plan"), /modules from the agent's cache: m \(/);
      assert.ok(!readFileSync(moduleFile, "utf8").includes("planted"));
      for (let i = 0; i < attempts.length; i++)
        assert.match(log, new RegExp(`WRITE${i}:refused`), `${attempts[i]} was not refused:\n${log}`);
      assert.ok(!readFileSync(binary, "utf8").includes("planted"));
      assert.ok(!existsSync(join(entry, "planted")));
      assert.equal(statSync(binary).mode & 0o222, 0);
      assert.deepEqual(readdirSync(join(cache, "providers", "mirror")), [registry.host]);
    } finally {
      await agent.stop("SIGKILL");
    }
  },
);

test("DROVER_AGENT_PROVIDER_CACHE_ENABLED=false: runs install their providers themselves and the agent keeps no cache", async () => {
  await stack.server.api(routes.createPool, { body: { name: "pcache-off" } });
  const token = (
    await stack.server.api(routes.createPoolToken, { params: { pool: "pcache-off" }, body: { description: "off" } })
  ).body.token as string;
  const cache = join(home, "off", "cache");
  const agent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    DROVER_TOKEN: token,
    DROVER_AGENT_NAME: "pcache-off",
    DROVER_CA_CERT: registry.caFile,
    // terraform itself reaches the registry now: the runs must trust its certificate.
    DROVER_CONTAINER_TASK_CA_CERT: registry.caFile,
    DROVER_AGENT_DATA_DIR: join(home, "off", "data"),
    DROVER_AGENT_CACHE_DIR: cache,
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_PROVIDER_CACHE_ENABLED: "false",
  });
  try {
    await agent.waitFor(/registered/);
    await stack.server.api(routes.createWorkspace, { body: { name: "pcache-off", pool: "pcache-off" } });
    const before = registry.downloads.get(registry.archiveName("gamma", "0.3.0")) ?? 0;
    const dir = writeConfig(stack.dir, "pcache-off", { "main.tf": providerConfig(registry, three.slice(2, 3), "off") });
    const runId = await stack.startRun(dir, "pcache-off", ["--plan-only"]);
    const run = await stack.waitForRun(runId, ["planned_and_finished", "errored", "failed"], 120_000);
    const log = await runLog(stack.server, runId, "plan");
    assert.equal(run.status, "planned_and_finished", `${run.errorMessage}\n${log}`);
    assert.doesNotMatch(log, /from the agent's cache/);
    assert.ok(
      (registry.downloads.get(registry.archiveName("gamma", "0.3.0")) ?? 0) > before,
      `terraform downloaded it:\n${log}`,
    );
    assert.match(log, /Installed 127\.0\.0\.1:\d+\/drover\/gamma v0\.3\.0/);
    assert.ok(!existsSync(join(cache, "providers")), "no cache directory");
  } finally {
    await agent.stop("SIGKILL");
  }
});

test("DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB and DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB: above 1 MB the older entry of each cache is evicted once no run holds it", async () => {
  const pad = "x".repeat(700_000);
  const big = await startProviderRegistry(
    [{ type: "big", versions: ["1.0.0", "2.0.0"], padBytes: 700_000 }],
    [
      {
        name: "large",
        versions: ["1.0.0", "2.0.0"],
        files: { "main.tf": 'output "v" { value = "large-VERSION" }\n', "pad.txt": pad },
      },
    ],
  );
  await stack.server.api(routes.createPool, { body: { name: "pcache-limit" } });
  const token = (
    await stack.server.api(routes.createPoolToken, { params: { pool: "pcache-limit" }, body: { description: "limit" } })
  ).body.token as string;
  const cache = join(home, "limit", "cache");
  const port = await freePort();
  const agent = spawnDrover(["agent", "run"], {
    ...stack.baseEnv,
    DROVER_TOKEN: token,
    DROVER_AGENT_NAME: "pcache-limit",
    DROVER_CA_CERT: big.caFile,
    DROVER_AGENT_DATA_DIR: join(home, "limit", "data"),
    DROVER_AGENT_CACHE_DIR: cache,
    DROVER_AGENT_HEALTH_PORT: String(port),
    DROVER_AGENT_MODULE_CACHE_ENABLED: "true",
    DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB: "1",
    DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB: "1",
  });
  const cacheMetric = async (name: string, which: string) => {
    // eslint-disable-next-line no-restricted-globals -- the agent's /metrics, not the server
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return Number(new RegExp(`^${name}\\{cache="${which}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? "NaN");
  };
  try {
    await agent.waitFor(/registered/);
    for (const v of ["1.0.0", "2.0.0"]) {
      const ws = `pcache-limit-${v.replace(/\./g, "-")}`;
      await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: "pcache-limit" } });
      const dir = writeConfig(stack.dir, ws, {
        "main.tf": `${providerConfig(big, [{ type: "big", version: v }], ws)}\nmodule "m" {\n  source  = "${big.host}/drover/large/null"\n  version = "${v}"\n}\noutput "m" { value = module.m.v }\n`,
      });
      const runId = await stack.startRun(dir, ws, ["--plan-only"]);
      const run = await stack.waitForRun(runId, ["planned_and_finished", "errored", "failed"], 120_000);
      assert.equal(
        run.status,
        "planned_and_finished",
        `${run.errorMessage}\n${await runLog(stack.server, runId, "plan")}`,
      );
    }
    const versions = (dir: string) => (existsSync(dir) ? readdirSync(dir).sort() : []);
    assert.deepEqual(
      versions(join(cache, "providers", "mirror", big.host, "drover", "big")),
      ["2.0.0"],
      "the provider cache kept the newest entry only",
    );
    assert.deepEqual(
      versions(join(cache, "modules", "entries", big.host, "drover", "large", "null")),
      ["2.0.0"],
      "the module cache kept the newest entry only",
    );
    assert.equal(await cacheMetric("drover_agent_cache_evictions_total", "providers"), 1);
    assert.equal(await cacheMetric("drover_agent_cache_evictions_total", "modules"), 1);
  } finally {
    await agent.stop("SIGKILL");
    await big.close();
  }
});
