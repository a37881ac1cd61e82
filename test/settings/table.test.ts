import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { resolveSettings } from "@drover/cli/settings";
import { freePort, spawnDrover } from "../support/processes.js";
import {
  closestSetting,
  InvalidSettingError,
  settings,
  SettingsSource,
  unknownSettingWarnings,
  type SettingName,
  type SettingSpec,
} from "@drover/protocol";
import { tempDir } from "../support/temp-dir.js";

// The settings table: every default is a value its own parser accepts, precedence is the same
// everywhere, and unknown DROVER_* variables are named with the closest known setting.

test("every default is a value the setting's parser gives back unchanged", () => {
  for (const name of Object.keys(settings) as SettingName[]) {
    const spec: SettingSpec<unknown> = settings[name];
    if (spec.default === undefined) continue;
    assert.deepEqual(spec.parse(String(spec.default), name), spec.default, name);
  }
});

test("a flag beats its variable; an empty value counts as unset", () => {
  const src = new SettingsSource({ DROVER_PORT: "9000", DROVER_HOST: "" }, { port: "9100" });
  assert.equal(src.get("DROVER_PORT"), 9100);
  assert.equal(src.origin("DROVER_PORT"), "flag");
  assert.equal(src.get("DROVER_HOST"), "127.0.0.1");
  assert.equal(new SettingsSource({ DROVER_PORT: "9000" }).get("DROVER_PORT"), 9000);
});

test("a bad value is an invalid_setting error naming the variable, with a hint", () => {
  const err = (() => {
    try {
      new SettingsSource({ DROVER_CA_CERT: "/nonexistent/ca.pem" }).get("DROVER_CA_CERT");
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  assert.ok(err instanceof InvalidSettingError);
  assert.equal(err.code, "invalid_setting");
  assert.equal(err.setting, "DROVER_CA_CERT");
  assert.match(err.hint ?? "", /readable PEM file/);
});

test("DROVER_CA_CERT takes a path or base64 PEM, in every process alike", () => {
  const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const file = join(tempDir("drover-ca-"), "ca.pem");
  writeFileSync(file, pem);
  assert.equal(new SettingsSource({ DROVER_CA_CERT: file }).get("DROVER_CA_CERT"), pem);
  assert.equal(new SettingsSource({ DROVER_CA_CERT: Buffer.from(pem).toString("base64") }).get("DROVER_CA_CERT"), pem);
});

test("the CLI: --url/--token beat DROVER_URL/DROVER_TOKEN, which beat the credentials file", () => {
  const dir = tempDir("drover-cli-settings-");
  writeFileSync(join(dir, "credentials.json"), JSON.stringify({ url: "http://file.example", token: "file-token" }));
  const env = { DROVER_CONFIG_DIR: dir };
  assert.deepEqual(resolveSettings({}, env), { url: "http://file.example", token: "file-token" });
  const withEnv = { ...env, DROVER_URL: "http://env.example/", DROVER_TOKEN: "env-token" };
  assert.deepEqual(resolveSettings({}, withEnv), { url: "http://env.example", token: "env-token" });
  assert.deepEqual(resolveSettings({ url: "http://flag.example", token: "flag-token" }, withEnv), {
    url: "http://flag.example",
    token: "flag-token",
  });
});

test("unknown DROVER_* variables are warned about with the closest setting; run variables, the test suite's and the build scripts' are not", () => {
  assert.equal(closestSetting("DROVER_AGENT_CONCURENCY"), "DROVER_AGENT_CONCURRENCY");
  assert.equal(closestSetting("DROVER_TOKN_FILE"), "DROVER_TOKEN_FILE");
  assert.deepEqual(
    unknownSettingWarnings({
      DROVER_DATABSE_URL: "x",
      DROVER_URL: "http://a",
      DROVER_RUN_ID: "run_1",
      DROVER_TEST_PG_URL: "x",
      DROVER_CACHE_DIR: "/c",
      HOME: "/root",
    }),
    ["DROVER_DATABSE_URL is not a Drover setting and is ignored; did you mean DROVER_DATABASE_URL?"],
  );
});

test("drover (a user command): a bad DROVER_URL is an invalid_setting, exit 2; --url beats it", async () => {
  const base = { PATH: process.env.PATH, HOME: tempDir("drover-home-"), DROVER_TOKEN: "t" };
  const bad = spawnDrover(["pool", "list"], { ...base, DROVER_URL: "ftp://drover.example" });
  const badExit = await bad.exited;
  assert.equal(badExit.code, 2, bad.output());
  assert.match(
    bad.output(),
    /^drover: DROVER_URL must be http:\/\/ or https:\/\/, got "ftp:\/\/drover.example" \(invalid_setting\)/,
  );
  // Nothing listens on this port: the flag's URL is the one dialled (refused), not the variable's.
  const port = await freePort();
  const flagged = spawnDrover(["pool", "list", "--url", `http://127.0.0.1:${port}`], {
    ...base,
    DROVER_URL: "ftp://drover.example",
  });
  const flaggedExit = await flagged.exited;
  assert.equal(flaggedExit.code, 1, flagged.output());
  assert.match(flagged.output(), /\(server_unreachable\)/);
  assert.doesNotMatch(flagged.output(), /invalid_setting/);
});

test("drover server: a log level other than the four it documents is an invalid_setting, exit 2", async () => {
  const server = spawnDrover(["server", "--data-dir", tempDir("drover-level-"), "--port", "0"], {
    PATH: process.env.PATH,
    DROVER_LOG_LEVEL: "verbose",
  });
  const exit = await server.exited;
  assert.equal(exit.code, 2, server.output());
  assert.match(
    server.output(),
    /DROVER_LOG_LEVEL must be one of debug, info, warn, error, got "verbose" \(invalid_setting\)/,
  );
});
