import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { droverBin, spawnDrover, spawnProcess, type Proc } from "../support/processes.js";

// The server's own log as its operator sees it: readable lines on a terminal (a pseudo-terminal
// made by util-linux `script`), pino's JSON when piped, `--log-format` to choose; the lease
// grace of a start with no job in flight only at debug level.

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function env(): NodeJS.ProcessEnv {
  const dir = mkdtempSync(join(tmpdir(), "drover-log-format-"));
  dirs.push(dir);
  return { PATH: process.env.PATH, HOME: dir, DROVER_DATA_DIR: dir, DROVER_PORT: "0", DROVER_LOG_LEVEL: "debug" };
}

const graceLine = /lease expiry waits one lease TTL/;

async function logOf(proc: Proc): Promise<string> {
  try {
    await proc.waitFor(/lease expiry waits one lease TTL[^\n]*\n/);
    return proc.output();
  } finally {
    await proc.stop("SIGTERM");
  }
}

const script = "/usr/bin/script";
test("on a terminal the server logs readable lines by default", { skip: !existsSync(script) }, async () => {
  const shell = `"${process.execPath}" "${droverBin}" server`;
  const output = await logOf(spawnProcess(script, ["-qfec", shell, "/dev/null"], env()));
  assert.match(output, /^INFO drover server listening url=http:\/\/127\.0\.0\.1:\d+ database=sqlite\r?$/m);
  assert.match(output, /^DEBUG lease expiry waits one lease TTL .*graceMs=\d+ leasedJobs=0\r?$/m);
  assert.doesNotMatch(output, /\{"level"/);
});

test("piped, the server logs pino JSON; --log-format plain makes it readable", async () => {
  const json = await logOf(spawnDrover(["server"], env()));
  const lines = json.split("\n").filter((l) => l.startsWith("{"));
  const grace = lines.map((l) => JSON.parse(l) as { level: number; msg: string }).find((l) => graceLine.test(l.msg));
  assert.ok(grace, json);
  assert.equal(grace.level, 20, "debug: a start with no job in flight has nothing to wait for");

  const plain = await logOf(spawnDrover(["server", "--log-format", "plain"], env()));
  assert.match(plain, /^INFO drover server listening url=/m);
  assert.doesNotMatch(plain, /\{"level"/);
});
