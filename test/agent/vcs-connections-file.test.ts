import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { loadVcsAgentConfig, parseVcsConnections } from "@drover/agent/vcs";
import { loadAgentConfig } from "@drover/agent";
import { InvalidSettingError, newPoolToken, settings, settingsReadBy, type SettingName } from "@drover/protocol";

/*
 * A VCS agent's configuration. Its connections file with a GitHub App: the key is read from its
 * file (a relative path from the connections file's folder), and every problem is one line naming
 * the file and the connection, never the key's content. Its settings: a run agent's setting it
 * would ignore stops it at start, naming the setting.
 */

const dir = mkdtempSync(join(tmpdir(), "drover-vcs-file-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const privateKey = generateKeyPairSync("rsa", { modulusLength: 2048 })
  .privateKey.export({ type: "pkcs1", format: "pem" })
  .toString();
mkdirSync(join(dir, "keys"));
writeFileSync(join(dir, "keys", "app.pem"), privateKey);
const source = join(dir, "connections.json");
const parse = (c: object) => parseVcsConnections(JSON.stringify({ ghe: c }), source);
const app = (extra: object = {}) => ({
  provider: "github",
  url: "https://ghe.internal",
  githubApp: { appId: "777", installationId: 4242, privateKeyFile: "keys/app.pem", ...extra },
});

test("a GitHub App connection reads its key from a path relative to the connections file", () => {
  const ghe = parse(app()).get("ghe");
  assert.deepEqual(ghe?.auth, { kind: "github-app", appId: "777", installationId: 4242, privateKey });
  assert.equal(ghe?.apiUrl, "https://ghe.internal/api/v3");
  const absolute = parse(app({ privateKeyFile: join(dir, "keys", "app.pem") })).get("ghe");
  assert.equal(absolute?.auth.kind, "github-app");
});

test("a bad GitHub App entry is one line naming the file and the connection, never the key", () => {
  const refused = (c: object, why: RegExp) =>
    assert.throws(
      () => parse(c),
      (err: Error) => {
        assert.match(err.message, why);
        assert.ok(err.message.includes(source), err.message);
        assert.ok(!err.message.includes("PRIVATE KEY"), err.message);
        assert.equal(err.message.split("\n").length, 1, err.message);
        return true;
      },
    );
  refused(app({ privateKeyFile: "keys/missing.pem" }), /ghe\.githubApp\.privateKeyFile .*missing\.pem cannot be read/);
  writeFileSync(join(dir, "keys", "not-a-key.pem"), "ghp_notakey");
  refused(app({ privateKeyFile: "keys/not-a-key.pem" }), /not-a-key\.pem is not a PEM private key/);
  refused({ ...app(), token: "ghp_token0123456789" }, /give a token or a githubApp, one of them/);
  refused({ provider: "github", url: "https://ghe.internal" }, /give a token or a githubApp, one of them/);
  refused({ ...app(), provider: "gitlab" }, /a GitHub App authenticates to GitHub only/);
  refused(app({ appId: "seven" }), /a GitHub App id/);
  refused(app({ installationId: -1 }), /installationId/);
  refused(app({ privateKey: privateKey }), /githubApp/);
});

/** Throws an `InvalidSettingError` of `setting`: one line naming it and saying the VCS agent does not use it. */
function refusedForVcs(load: () => unknown, setting: string, why?: RegExp): void {
  assert.throws(load, (err: unknown) => {
    assert.ok(err instanceof InvalidSettingError, String(err));
    assert.equal(err.code, "invalid_setting");
    assert.equal(err.setting, setting);
    assert.match(err.message, /VCS agent/);
    assert.equal(err.message.split("\n").length, 1, err.message);
    if (why) assert.match(err.message, why);
    return true;
  });
}

const connections = join(dir, "vcs-settings.json");
writeFileSync(
  connections,
  JSON.stringify({ ghe: { provider: "github", url: "https://ghe.internal", token: "ghp_x1" } }),
);
const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_relay" });
const base = { DROVER_TOKEN: token, DROVER_AGENT_VCS_CONNECTIONS_FILE: connections, DROVER_AGENT_DATA_DIR: dir };

test("the VCS agent refuses, naming it, each run agent setting it would ignore; it takes those it reads", () => {
  const ignored: Record<string, [string, RegExp?]> = {
    DROVER_AGENT_CONCURRENCY: ["3", /DROVER_AGENT_VCS_CONCURRENCY/],
    DROVER_AGENT_WORKER_ON_STOP_ACTION: ["drain", /DROVER_AGENT_GRACE_PERIOD_SECONDS/],
    DROVER_AGENT_DRIVER: ["local"],
    DROVER_AGENT_SINGLE: ["true"],
    DROVER_AGENT_CACHE_DIR: [dir],
    DROVER_AGENT_PROVIDER_CACHE_ENABLED: ["false"],
    DROVER_AGENT_MODULE_CACHE_ENABLED: ["true"],
    DROVER_AGENT_TERRAFORM_RELEASES_URL: ["https://releases.internal/terraform"],
    DROVER_AGENT_HOOKS_DIR: [dir],
    DROVER_AGENT_PLAN_REUSE_SECONDS: ["0"],
    DROVER_AGENT_RUN_AS_USER: ["2000"],
    DROVER_AGENT_DOCKER_IMAGE: ["runner:1"],
    DROVER_AGENT_STATUS_FILE: [join(dir, "status.json")],
    DROVER_AGENT_OTLP_TRACES_ENABLED: ["false"],
    DROVER_AGENT_KUBERNETES_NAMESPACE: ["drover"],
  };
  for (const [name, [value, why]] of Object.entries(ignored))
    refusedForVcs(() => loadVcsAgentConfig({ ...base, [name]: value }), name, why);
  // A flag is refused as its variable is, naming the flag.
  refusedForVcs(() => loadVcsAgentConfig(base, { concurrency: "3" }), "DROVER_AGENT_CONCURRENCY", /--concurrency/);
  refusedForVcs(() => loadVcsAgentConfig(base, { stopAction: "drain" }), "DROVER_AGENT_WORKER_ON_STOP_ACTION");

  const tokenFile = join(dir, "relay.token");
  writeFileSync(tokenFile, `${token}\n`);
  const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const config = loadVcsAgentConfig({
    DROVER_AGENT_VCS_CONNECTIONS_FILE: connections,
    DROVER_URL: "https://drover.example.com",
    DROVER_TOKEN_FILE: tokenFile,
    DROVER_AGENT_NAME: "relay-1",
    DROVER_AGENT_DATA_DIR: dir,
    // Below the 30 s a run agent's graceful stop needs: the VCS agent has no stop action.
    DROVER_AGENT_GRACE_PERIOD_SECONDS: "10",
    DROVER_AGENT_LOG_FORMAT: "plain",
    DROVER_AGENT_DEBUG: "true",
    DROVER_AGENT_HEALTH_PORT: "9090",
    DROVER_AGENT_HEALTH_ADDRESS: "127.0.0.1",
    DROVER_AGENT_OTLP_ENDPOINT: "http://collector:4317",
    DROVER_AGENT_OTLP_PROTOCOL: "grpc",
    DROVER_AGENT_OTLP_METRICS_ENABLED: "true",
    DROVER_CA_CERT: Buffer.from(pem).toString("base64"),
    DROVER_AGENT_POLL_WAIT_MS: "1000",
    DROVER_AGENT_VCS_CONCURRENCY: "8",
    DROVER_AGENT_VCS_WEBHOOK_PORT: "8090",
    DROVER_AGENT_VCS_WEBHOOK_ADDRESS: "127.0.0.1",
    HTTPS_PROXY: "http://proxy.internal:3128",
    OTEL_SERVICE_NAME: "relay",
    // Not an agent's: Terraform's own, and the server's the drover image sets for every command.
    TF_CLI_CONFIG_FILE: join(dir, "terraformrc"),
    DROVER_HOST: "0.0.0.0",
  });
  const a = config.agent;
  assert.deepEqual(
    [a.url, a.token, a.name, a.dataDir, a.gracePeriodMs, a.logFormat, a.debug, a.healthPort, a.healthAddress],
    ["https://drover.example.com", token, "relay-1", dir, 10_000, "plain", true, 9090, "127.0.0.1"],
  );
  assert.equal(a.caCertPem, pem);
  assert.equal(a.pollWaitMs, 1000);
  assert.deepEqual([a.otlp?.endpoint, a.otlp?.protocol, a.otlp?.metrics], ["http://collector:4317", "grpc", true]);
  assert.deepEqual([config.concurrency, config.webhookPort, config.webhookAddress], [8, 8090, "127.0.0.1"]);
  // Its flags are the variables it reads.
  const flagged = loadVcsAgentConfig(base, { name: "relay-2", healthPort: "0", logFormat: "dev", dataDir: dir });
  assert.deepEqual([flagged.agent.name, flagged.agent.healthPort, flagged.agent.logFormat], ["relay-2", 0, "dev"]);
});

test("the table says what the VCS agent reads: every other setting of the run agent or controller is refused by it, and a run agent refuses the VCS agent's own", () => {
  const vcsReads = new Set<SettingName>(settingsReadBy("vcs-agent"));
  const runAgents = (n: SettingName) => [...settingsReadBy("agent"), ...settingsReadBy("controller")].includes(n);
  const refused = (Object.keys(settings) as SettingName[]).filter(
    (n) => n.startsWith("DROVER_") && runAgents(n) && !vcsReads.has(n),
  );
  assert.ok(refused.length > 40, `${refused.length} refused`);
  // Refused before its value is parsed: any value is refused alike.
  for (const name of refused) refusedForVcs(() => loadVcsAgentConfig({ ...base, [name]: "x" }), name);
  const vcsOnly = [...vcsReads].filter((n) => settings[n].readers.length === 1);
  assert.deepEqual(vcsOnly.sort(), [
    "DROVER_AGENT_VCS_CONCURRENCY",
    "DROVER_AGENT_VCS_CONNECTIONS_FILE",
    "DROVER_AGENT_VCS_WEBHOOK_ADDRESS",
    "DROVER_AGENT_VCS_WEBHOOK_PORT",
  ]);
  for (const name of vcsOnly)
    assert.throws(
      () => loadAgentConfig({ DROVER_TOKEN: token, [name]: "1" }),
      (err: unknown) =>
        err instanceof InvalidSettingError && err.setting === name && /VCS agent .* only/.test(err.message),
    );
});
