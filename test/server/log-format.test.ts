import assert from "node:assert/strict";
import { test } from "node:test";
import { loadServerConfig } from "@drover/server";
import { defaultLogFormat, readableLogLine } from "@drover/runtime";

// The readable form of a process's own log, and the server's choice of it.

test("a pino line reads as LEVEL message key=value, an error by its message, time and pid left out", () => {
  const line = JSON.stringify({
    level: 50,
    time: Date.UTC(2026, 10, 29, 9, 30, 1, 250),
    pid: 7,
    hostname: "h",
    err: { type: "Error", message: "connection refused", stack: "Error: connection refused\n    at x" },
    gapMs: 1200,
    msg: "sweep failed",
  });
  assert.equal(readableLogLine(line, "plain"), "ERROR sweep failed err=connection refused gapMs=1200");
  assert.equal(readableLogLine(line, "dev"), "09:30:01.250 ERROR sweep failed err=connection refused gapMs=1200");
  assert.equal(readableLogLine("not json\n", "plain"), "not json");
});

test("the server's log format: the setting, else plain on a terminal and JSON otherwise", () => {
  const load = (env: NodeJS.ProcessEnv, stdoutIsTty: boolean, flags = {}) =>
    loadServerConfig({ env: { DROVER_DATA_DIR: "/tmp/x", ...env }, flags, stdoutIsTty }).logFormat;
  assert.equal(load({}, true), "plain");
  assert.equal(load({}, false), "json");
  assert.equal(load({ DROVER_LOG_FORMAT: "json" }, true), "json");
  assert.equal(load({ DROVER_LOG_FORMAT: "json" }, false, { logFormat: "dev" }), "dev");
  assert.throws(
    () => load({ DROVER_LOG_FORMAT: "pretty" }, false),
    /DROVER_LOG_FORMAT must be one of json, plain, dev/,
  );
  assert.equal(defaultLogFormat(undefined), "json");
});
