import { messageOf } from "@drover/protocol";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { defaultClientTimeouts } from "../session/client.js";
import { proxyDispatcher } from "../net/http-dispatcher.js";
import type { CacheSettings } from "../shared-settings.js";
import { EngineCache } from "../engines/cache.js";
import { hashicorpReleaseKey } from "../engines/keys.js";
import { ModuleCache } from "../modules/cache.js";
import { ProviderCache } from "../providers/cache.js";

/** The caches a process's runs share (providers and modules unset when disabled). */
export interface Caches {
  providers: ProviderCache | undefined;
  modules: ModuleCache | undefined;
  /** The terraform/tofu releases workspaces ask for; always on (it touches the disk on first use). */
  engines: EngineCache | undefined;
}

/**
 * The HTTP client of the caches of a worker that has no AgentClient (a Kubernetes worker): the
 * same client the agent's own is, with the agent's connect deadline.
 */
export function cacheDispatcher(
  caCertPem: string | undefined,
  connectMs = defaultClientTimeouts.connectMs,
): Dispatcher {
  return proxyDispatcher({ caCertPem, connectMs });
}

/**
 * Opens the enabled caches below `cacheDir` (`providers/`, `modules/`). A cache whose directory
 * cannot be made (a read-only or foreign-owned volume) is left off with a warning: runs then
 * install what they need themselves, as with the cache disabled. `caCertPem` (DROVER_CA_CERT) is
 * what `dispatcher` trusts beside the default roots; the module cache's git trusts it too.
 */
export function openCaches(
  s: CacheSettings,
  dispatcher: Dispatcher,
  logger: Logger,
  caCertPem: string | undefined,
): Caches {
  const mb = 1024 * 1024;
  const open = <T>(name: string, make: () => T): T | undefined => {
    try {
      return make();
    } catch (err) {
      logger.warn(
        { dir: join(s.cacheDir, name), err: messageOf(err) },
        `the ${name} cache cannot be used: runs install their ${name} themselves`,
      );
      return undefined;
    }
  };
  return {
    providers: s.providerCacheEnabled
      ? open("providers", () => {
          const limitBytes = s.providerCacheSizeLimitMb * mb;
          const allowMetadataAddresses = s.cacheAllowMetadataAddresses;
          const dir = join(s.cacheDir, "providers");
          return new ProviderCache({ dir, limitBytes, dispatcher, logger, allowMetadataAddresses });
        })
      : undefined,
    modules: s.moduleCacheEnabled
      ? open(
          "modules",
          () =>
            new ModuleCache({
              dir: join(s.cacheDir, "modules"),
              limitBytes: s.moduleCacheSizeLimitMb * mb,
              dispatcher,
              logger,
              caCertPem,
              allowMetadataAddresses: s.cacheAllowMetadataAddresses,
              allowLocalSources: s.moduleCacheLocalSources,
            }),
        )
      : undefined,
    engines: new EngineCache({
      dir: join(s.cacheDir, "engines"),
      limitBytes: s.binaryCacheSizeLimitMb * mb,
      dispatcher,
      logger,
      releases: {
        terraform: s.engines.terraformReleasesUrl,
        tofu: s.engines.tofuReleasesUrl,
        tofuIndex: s.engines.tofuVersionsUrl,
      },
      signingKeys: [hashicorpReleaseKey, ...(s.engines.signingKeys === undefined ? [] : [s.engines.signingKeys])],
      trustedFingerprints: s.engines.trustedFingerprints,
      pathFallback: s.engines.pathFallback,
      pathEnv: process.env.PATH,
    }),
  };
}
