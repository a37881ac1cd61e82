import assert from "node:assert/strict";
import { test } from "node:test";
import { loadServerConfig } from "@drover/server";

// Lease, agent-TTL and heartbeat settings take fractions of a second, so tests of leases and
// silent agents wait milliseconds; whole seconds keep their meaning.

const load = (env: Record<string, string>) =>
  loadServerConfig({ env: { DROVER_DATA_DIR: "/tmp/drover-lease-settings", ...env } });

test("fractional seconds become milliseconds", () => {
  const config = load({
    DROVER_LEASE_TTL_SECONDS: "0.75",
    DROVER_AGENT_TTL_SECONDS: "0.5",
    DROVER_AGENT_HEARTBEAT_SECONDS: "0.125",
  });
  assert.equal(config.leaseTtlMs, 750);
  assert.equal(config.agentTtlMs, 500);
  assert.equal(config.heartbeatIntervalMs, 125);
  assert.equal(load({ DROVER_LEASE_TTL_SECONDS: "30" }).leaseTtlMs, 30_000);
});

test("below 0.1 s, beyond milliseconds or not a number is refused with the setting's name", () => {
  for (const name of ["DROVER_LEASE_TTL_SECONDS", "DROVER_AGENT_TTL_SECONDS", "DROVER_AGENT_HEARTBEAT_SECONDS"]) {
    for (const bad of ["0.05", "0", "0.0001", "-1", "1e3", "soon"]) {
      assert.throws(
        () => load({ [name]: bad }),
        (err: Error) => err.message.includes(name),
        `${name}=${JSON.stringify(bad)}`,
      );
    }
  }
});
