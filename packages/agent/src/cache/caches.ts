import type { SettingsSource } from "@drover/protocol";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { defaultClientTimeouts } from "../client.js";
import { proxyDispatcher } from "../http-dispatcher.js";
import { ModuleCache } from "../modules/cache.js";
import { ProviderCache } from "../providers/cache.js";

/** The cache settings every kind of agent process reads the same way. */
export interface CacheSettings {
  cacheDir: string;
  providerCacheEnabled: boolean;
  providerCacheSizeLimitMb: number;
  moduleCacheEnabled: boolean;
  moduleCacheSizeLimitMb: number;
}

/** Reads DROVER_AGENT_CACHE_DIR and the provider and module cache settings. */
export function cacheSettings(src: SettingsSource): CacheSettings {
  return {
    cacheDir: src.get("DROVER_AGENT_CACHE_DIR"),
    providerCacheEnabled: src.get("DROVER_AGENT_PROVIDER_CACHE_ENABLED"),
    providerCacheSizeLimitMb: src.get("DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB"),
    moduleCacheEnabled: src.get("DROVER_AGENT_MODULE_CACHE_ENABLED"),
    moduleCacheSizeLimitMb: src.get("DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB"),
  };
}

/** The caches a process's runs share (each unset when disabled). */
export interface Caches {
  providers: ProviderCache | undefined;
  modules: ModuleCache | undefined;
}

/**
 * The HTTP client of the caches of a worker that has no AgentClient (a Kubernetes worker): the
 * same client the agent's own is, with the agent's connect deadline.
 */
export function cacheDispatcher(caCertPem: string | undefined, connectMs = defaultClientTimeouts.connectMs): Dispatcher {
  return proxyDispatcher({ caCertPem, connectMs });
}

/**
 * Opens the enabled caches below `cacheDir` (`providers/`, `modules/`). A cache whose directory
 * cannot be made (a read-only or foreign-owned volume) is left off with a warning: runs then
 * install what they need themselves, as with the cache disabled.
 */
export function openCaches(s: CacheSettings, dispatcher: Dispatcher, logger: Logger): Caches {
  const mb = 1024 * 1024;
  const open = <T>(name: string, make: () => T): T | undefined => {
    try {
      return make();
    } catch (err) {
      logger.warn({ dir: join(s.cacheDir, name), err: err instanceof Error ? err.message : String(err) }, `the ${name} cache cannot be used: runs install their ${name} themselves`);
      return undefined;
    }
  };
  return {
    providers: s.providerCacheEnabled ? open("providers", () => new ProviderCache({ dir: join(s.cacheDir, "providers"), limitBytes: s.providerCacheSizeLimitMb * mb, dispatcher, logger })) : undefined,
    modules: s.moduleCacheEnabled ? open("modules", () => new ModuleCache({ dir: join(s.cacheDir, "modules"), limitBytes: s.moduleCacheSizeLimitMb * mb, dispatcher, logger })) : undefined,
  };
}
