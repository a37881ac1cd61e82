import { type SettingsSource, type StopAction } from "@drover/protocol";
import { otlpSettings as otlpOf, type OtlpSettings } from "@drover/runtime";

/*
 * The groups of settings every agent process reads alike: the agent (`agent run`, `agent
 * controller`), the pod worker and the node worker. Each is read here once, so a process never
 * spells the variables of a group by hand and all of them agree on units and defaults.
 */

export type { OtlpSettings };

/** The OTLP export settings (DROVER_AGENT_OTLP_*, then OTEL_*); undefined without an endpoint (no exporter is loaded). */
export function otlpSettings(src: SettingsSource): OtlpSettings | undefined {
  return otlpOf(src, "agent");
}

/** How an agent process stops, and the extra trust roots of its own HTTPS. */
export interface StopAndTrustSettings {
  stopAction: StopAction;
  gracePeriodMs: number;
  /** Extra trust roots (PEM) for the process's own HTTPS (DROVER_CA_CERT). */
  caCertPem: string | undefined;
}

/** The stop action, its grace period (in ms) and DROVER_CA_CERT. */
export function stopAndTrustSettings(src: SettingsSource): StopAndTrustSettings {
  return {
    stopAction: src.get("DROVER_AGENT_WORKER_ON_STOP_ACTION"),
    gracePeriodMs: src.get("DROVER_AGENT_GRACE_PERIOD_SECONDS") * 1000,
    caCertPem: src.get("DROVER_CA_CERT"),
  };
}

/** Engine downloads (DROVER_AGENT_*_RELEASES_URL, _ENGINE_*). */
export interface EngineSettings {
  terraformReleasesUrl: string;
  tofuReleasesUrl: string;
  tofuVersionsUrl: string;
  /** Armored keys given by the operator (HashiCorp's built-in key is added by the cache). */
  signingKeys: string | undefined;
  trustedFingerprints: string[];
  pathFallback: boolean;
}

/** Reads where engine releases come from (DROVER_AGENT_*_RELEASES_URL, DROVER_AGENT_ENGINE_*). */
export function engineSettings(src: SettingsSource): EngineSettings {
  return {
    terraformReleasesUrl: src.get("DROVER_AGENT_TERRAFORM_RELEASES_URL"),
    tofuReleasesUrl: src.get("DROVER_AGENT_TOFU_RELEASES_URL"),
    tofuVersionsUrl: src.get("DROVER_AGENT_TOFU_VERSIONS_URL"),
    signingKeys: src.get("DROVER_AGENT_ENGINE_SIGNING_KEYS"),
    trustedFingerprints: src.get("DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS"),
    pathFallback: src.get("DROVER_AGENT_ENGINE_PATH_FALLBACK"),
  };
}

/** The cache settings every kind of agent process reads the same way. */
export interface CacheSettings {
  cacheDir: string;
  providerCacheEnabled: boolean;
  providerCacheSizeLimitMb: number;
  moduleCacheEnabled: boolean;
  moduleCacheSizeLimitMb: number;
  /** The module cache fetches `git::file://` sources too (DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES). */
  moduleCacheLocalSources: boolean;
  /** The caches may fetch from link-local and metadata addresses (DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES). */
  cacheAllowMetadataAddresses: boolean;
  /** Soft limit of the engine releases in `<cache dir>/engines` (DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB). */
  binaryCacheSizeLimitMb: number;
  /** Where engine releases come from and whom they are trusted from. */
  engines: EngineSettings;
}

/** Reads DROVER_AGENT_CACHE_DIR and the provider and module cache settings. */
export function cacheSettings(src: SettingsSource): CacheSettings {
  return {
    cacheDir: src.get("DROVER_AGENT_CACHE_DIR"),
    providerCacheEnabled: src.get("DROVER_AGENT_PROVIDER_CACHE_ENABLED"),
    providerCacheSizeLimitMb: src.get("DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB"),
    moduleCacheEnabled: src.get("DROVER_AGENT_MODULE_CACHE_ENABLED"),
    moduleCacheSizeLimitMb: src.get("DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB"),
    moduleCacheLocalSources: src.get("DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES"),
    cacheAllowMetadataAddresses: src.get("DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES"),
    binaryCacheSizeLimitMb: src.get("DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB"),
    engines: engineSettings(src),
  };
}
