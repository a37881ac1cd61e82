import { DroverError } from "@drover/protocol";
import { BlockList, isIP } from "node:net";

/**
 * Link-local and cloud metadata addresses. A configuration names the hosts the agent's caches
 * fetch from (registries, module sources, and where they redirect); these addresses answer with
 * the credentials of the machine or pod the agent runs on, which a run must not reach through
 * the agent (a node worker's pod is outside the task pods' deny-metadata NetworkPolicy).
 * Loopback and private ranges stay allowed: local mirrors and in-house registries live there.
 */
const metadata = new BlockList();
metadata.addSubnet("169.254.0.0", 16, "ipv4"); // link-local: AWS, GCP, Azure, OpenStack IMDS, ECS task metadata
metadata.addAddress("100.100.100.200", "ipv4"); // Alibaba Cloud
metadata.addAddress("168.63.129.16", "ipv4"); // Azure WireServer
metadata.addSubnet("fe80::", 10, "ipv6"); // link-local
metadata.addAddress("fd00:ec2::254", "ipv6"); // AWS IMDS over IPv6
metadata.addAddress("fd00:ec2::23", "ipv6"); // AWS DNS over IPv6
metadata.addAddress("fd20:ce::254", "ipv6"); // GCP metadata over IPv6

/** The IPv4 address an IPv6 one carries (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`), if any. */
function embeddedIpv4(v6: string): string | undefined {
  const m = /^(?:::ffff:|64:ff9b::)(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(v6);
  if (!m) return undefined;
  if (m[1]) return m[1];
  const hi = parseInt(m[2] as string, 16);
  const lo = parseInt(m[3] as string, 16);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join(".");
}

/** Whether `address` (an IP literal) is link-local or a cloud metadata address. */
export function isMetadataAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  const family = isIP(bare);
  if (family === 4) return metadata.check(bare, "ipv4");
  if (family !== 6) return false;
  const v4 = embeddedIpv4(bare);
  return v4 !== undefined ? metadata.check(v4, "ipv4") : metadata.check(bare, "ipv6");
}

/** The agent refused to fetch from an address a run must not reach through it. */
export class FetchRefused extends DroverError {
  constructor(url: string, host: string, address: string) {
    const what = host === address ? `is ${address}` : `resolves to ${address}`;
    super(
      "fetch_refused",
      `refused to fetch ${url}: its host ${what}, a link-local or cloud metadata address; nothing was fetched ` +
        "(an operator who means such a mirror sets DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES=true)",
    );
  }
}

/** Looks a host name up; every address it resolves to, or none when it does not resolve. */
export type HostLookup = (host: string) => Promise<string[]>;

const systemLookup: HostLookup = async (host) => {
  const { lookup } = await import("node:dns/promises");
  try {
    return (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);
  } catch {
    // An unresolvable host fails the fetch itself, with the client's own error.
    return [];
  }
};

/**
 * Refuses `url` when its host is, or resolves to, a link-local or metadata address. Checked
 * before each request and each redirect; the client resolves the name again to connect, so a
 * DNS answer that changes in between (rebinding) and a host reached through an HTTP proxy
 * (which resolves it itself) are not covered.
 */
export async function checkFetchTarget(url: URL | string, lookup: HostLookup = systemLookup): Promise<void> {
  const u = new URL(url);
  if (u.protocol === "file:") return;
  const host = u.hostname.replace(/^\[|\]$/g, "");
  const addresses = isIP(host) ? [host] : await lookup(host);
  const bad = addresses.find(isMetadataAddress);
  if (bad !== undefined) throw new FetchRefused(u.href, host, bad);
}
