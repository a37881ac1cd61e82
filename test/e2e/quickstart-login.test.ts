import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { freePort, runDrover, spawnDrover } from "../support/processes.js";
import { terraformEnv } from "../support/terraform.js";

// The quickstart logs the CLI in without losing the user's own `drover login`: a login to another
// server is kept and the quickstart's credentials go to a config dir of its own; a login to the
// quickstart's own address is simply renewed.

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function quickstart(
  earlier: { url: string; token: string },
  port: number,
  settingsBy: "flags" | "env" = "flags",
) {
  const dir = mkdtempSync(join(tmpdir(), "drover-quickstart-login-"));
  dirs.push(dir);
  const configDir = join(dir, "config");
  mkdirSync(configDir);
  const credentials = join(configDir, "credentials.json");
  writeFileSync(credentials, JSON.stringify(earlier));
  const env = terraformEnv(dir, {
    DROVER_CONFIG_DIR: configDir,
    DROVER_AGENT_NAME: `quickstart-login-${port}`,
    DROVER_URL: "",
    DROVER_TOKEN: "",
  });
  const where = { dataDir: join(dir, "data"), port: String(port) };
  const proc =
    settingsBy === "flags"
      ? spawnDrover(["quickstart", "--data-dir", where.dataDir, "--port", where.port], env)
      : spawnDrover(["quickstart"], { ...env, DROVER_DATA_DIR: where.dataDir, DROVER_PORT: where.port });
  try {
    await proc.waitFor(/Press Ctrl-C to stop\./, 120_000);
  } finally {
    await proc.stop("SIGINT");
  }
  return { dir, env, credentials, printed: proc.output() };
}

test("a login to another server is kept; the quickstart prints the DROVER_CONFIG_DIR of its own", async () => {
  const earlier = { url: "http://drover.example.com:8800", token: "drv_u_mine.secret" };
  const { dir, env, credentials, printed } = await quickstart(earlier, await freePort());
  assert.deepEqual(JSON.parse(readFileSync(credentials, "utf8")), earlier, "the earlier login is untouched");
  const own = join(dir, "data", "cli-config");
  assert.match(printed, /Your earlier login \(http:\/\/drover\.example\.com:8800, in .*\) is kept/);
  assert.ok(printed.includes(`  export DROVER_CONFIG_DIR=${own}\n`), printed);
  const saved = JSON.parse(readFileSync(join(own, "credentials.json"), "utf8")) as { url: string; token: string };
  assert.equal(saved.token, readFileSync(join(dir, "data", "admin-token"), "utf8").trim());
  // The printed line makes the CLI use the quickstart's login (the server has stopped: the URL is what it reads).
  const res = await runDrover(["workspace", "list"], { ...env, DROVER_CONFIG_DIR: own });
  assert.match(res.stderr, new RegExp(`cannot reach the Drover server at ${saved.url.replace(/[.]/g, "\\.")}`));
});

test("a login to the quickstart's own address is renewed quietly (its port and data dir from DROVER_PORT and DROVER_DATA_DIR)", async () => {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const { dir, credentials, printed } = await quickstart({ url, token: "drv_u_old.token" }, port, "env");
  const saved = JSON.parse(readFileSync(credentials, "utf8")) as { url: string; token: string };
  assert.equal(saved.url, url);
  assert.equal(saved.token, readFileSync(join(dir, "data", "admin-token"), "utf8").trim());
  assert.doesNotMatch(printed, /is kept|DROVER_CONFIG_DIR=/);
  assert.match(printed, /The CLI is logged in \(/);
});
