import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ProviderCache } from "@drover/agent";
import { repoRoot, track } from "./harness.js";
import { median, type Figure } from "./report.js";

/** The part of test/support/provider-registry.ts this bench uses (built by `tsc -b` with the tests). */
interface Registry {
  host: string;
  caFile: string;
  source(type: string): string;
  h1(type: string, version: string): string;
  close(): Promise<void>;
}
interface RegistryModule {
  startProviderRegistry(p: Array<{ type: string; versions: string[]; padBytes?: number }>): Promise<Registry>;
  providerConfig(r: Registry, types: Array<{ type: string; version: string }>): string;
}

const three = [
  { type: "alpha", version: "1.0.0" },
  { type: "beta", version: "1.0.0" },
  { type: "gamma", version: "1.0.0" },
];

function init(dir: string, cliConfig: string, caFile: string, extra: Record<string, string> = {}): Promise<number> {
  const rc = join(dir, ".terraformrc");
  writeFileSync(rc, cliConfig);
  const env = {
    ...process.env,
    TF_CLI_CONFIG_FILE: rc,
    CHECKPOINT_DISABLE: "1",
    TF_IN_AUTOMATION: "1",
    SSL_CERT_FILE: caFile,
    ...extra,
  };
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = track(
      spawn("terraform", ["init", "-input=false", "-no-color", "-backend=false"], {
        cwd: dir,
        env,
        stdio: ["ignore", "ignore", "pipe"],
      }),
    );
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.on("exit", (code) =>
      code === 0 ? resolve(Date.now() - started) : reject(new Error(`terraform init failed: ${err}`)),
    );
  });
}

/**
 * Provider installation, cold and warm: bare terraform (direct, and with its plugin cache) beside
 * the agent's cache (prepare + init), 3 providers of 20 MB each from a registry on 127.0.0.1; and
 * 12 concurrent inits × 3 rounds on one empty cache, TF_PLUGIN_CACHE_DIR against the agent's
 * cache, counting lock files with a wrong h1.
 */
export async function benchProviderCache(reps = 3): Promise<Figure[]> {
  const mod = (await import(
    pathToFileURL(join(repoRoot, "test", "dist", "support", "provider-registry.js")).href
  )) as RegistryModule;
  const registry = await mod.startProviderRegistry(
    three.map((p) => ({ type: p.type, versions: [p.version], padBytes: 20 << 20 })),
  );
  const root = mkdtempSync(join(tmpdir(), "drover-bench-pcache-"));
  const logger = createLogger("json", false);
  logger.level = "silent";
  const dispatcher = new UndiciAgent({ connect: { ca: readFileSync(registry.caFile, "utf8") } });
  let n = 0;
  const config = (): string => {
    const dir = join(root, `c${n++}`);
    mkdirSync(dir);
    writeFileSync(join(dir, "main.tf"), mod.providerConfig(registry, three));
    return dir;
  };
  const viaCache = async (cache: ProviderCache): Promise<number> => {
    const dir = config();
    const started = Date.now();
    const lease = await cache.prepare(dir, AbortSignal.timeout(120_000));
    await init(dir, lease.installation, registry.caFile);
    lease.release();
    return Date.now() - started;
  };
  try {
    const bareCold: number[] = [];
    const bareWarm: number[] = [];
    const cacheCold: number[] = [];
    const cacheWarm: number[] = [];
    for (let i = 0; i < reps; i++) {
      bareCold.push(await init(config(), "", registry.caFile));
      // terraform's plugin cache is used only for providers the lock file already vouches for.
      const pluginCache = join(root, `plugin-cache-${i}`);
      mkdirSync(pluginCache);
      const first = config();
      await init(first, "", registry.caFile, { TF_PLUGIN_CACHE_DIR: pluginCache });
      const second = config();
      copyFileSync(join(first, ".terraform.lock.hcl"), join(second, ".terraform.lock.hcl"));
      bareWarm.push(await init(second, "", registry.caFile, { TF_PLUGIN_CACHE_DIR: pluginCache }));
      const cache = new ProviderCache({ dir: join(root, `cache-${i}`), limitBytes: 1 << 30, dispatcher, logger });
      cacheCold.push(await viaCache(cache));
      cacheWarm.push(await viaCache(cache));
    }

    // Concurrent inits on one empty cache per round.
    const wrongLocks = async (mode: "plugin-cache" | "drover"): Promise<{ wrong: number; total: number }> => {
      let wrong = 0;
      let total = 0;
      for (let round = 0; round < 3; round++) {
        const shared = join(root, `race-${mode}-${round}`);
        mkdirSync(shared);
        const cache =
          mode === "drover" ? new ProviderCache({ dir: shared, limitBytes: 1 << 30, dispatcher, logger }) : undefined;
        const dirs = Array.from({ length: 12 }, () => config());
        await Promise.all(
          dirs.map(async (dir) => {
            if (cache) {
              const lease = await cache.prepare(dir, AbortSignal.timeout(120_000));
              await init(dir, lease.installation, registry.caFile).finally(() => lease.release());
            } else await init(dir, "", registry.caFile, { TF_PLUGIN_CACHE_DIR: shared }).catch(() => undefined);
          }),
        );
        for (const dir of dirs) {
          total++;
          let lock = "";
          try {
            lock = readFileSync(join(dir, ".terraform.lock.hcl"), "utf8");
          } catch {
            // No lock file: counted wrong.
          }
          if (!three.every((p) => lock.includes(registry.h1(p.type, p.version)))) wrong++;
        }
      }
      return { wrong, total };
    };
    const pluginRace = await wrongLocks("plugin-cache");
    const droverRace = await wrongLocks("drover");
    const ratio = median(cacheWarm) / median(cacheCold);
    return [
      {
        bench: "provider-cache",
        metric: "init, bare terraform, cold (3 × 20 MB providers)",
        unit: "ms",
        value: median(bareCold),
        baseline: null,
        baselineLabel: "",
        target: "—",
        met: null,
      },
      {
        bench: "provider-cache",
        metric: "init, bare terraform, TF_PLUGIN_CACHE_DIR warm + lock file",
        unit: "ms",
        value: median(bareWarm),
        baseline: median(bareCold),
        baselineLabel: "bare cold",
        target: "—",
        met: null,
      },
      {
        bench: "provider-cache",
        metric: "init via the agent's cache, cold (fetch + verify + init)",
        unit: "ms",
        value: median(cacheCold),
        baseline: median(bareCold),
        baselineLabel: "bare cold",
        target: "—",
        met: null,
      },
      {
        bench: "provider-cache",
        metric: "init via the agent's cache, warm",
        unit: "ms",
        value: median(cacheWarm),
        baseline: median(cacheCold),
        baselineLabel: "cache cold",
        target: "warm ≤ 0.3× cold",
        met: ratio <= 0.3,
        note: `ratio ${ratio.toFixed(2)}`,
      },
      {
        bench: "provider-cache",
        metric: "wrong lock files, 12 concurrent inits × 3 rounds, TF_PLUGIN_CACHE_DIR",
        unit: "count",
        value: pluginRace.wrong,
        baseline: pluginRace.total,
        baselineLabel: "inits",
        target: "—",
        met: null,
      },
      {
        bench: "provider-cache",
        metric: "wrong lock files, 12 concurrent inits × 3 rounds, agent's cache",
        unit: "count",
        value: droverRace.wrong,
        baseline: droverRace.total,
        baselineLabel: "inits",
        target: "0",
        met: droverRace.wrong === 0,
      },
    ];
  } finally {
    await registry.close();
    await dispatcher.close();
    rmSync(root, { recursive: true, force: true });
  }
}
