import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import BetterSqlite3 from "better-sqlite3";
import { rawTarGz } from "../support/archives.js";
import { call, callOk, startServerProc } from "../support/fault-runs.js";
import { spawnDrover } from "../support/processes.js";
import { routes } from "@drover/protocol";

// SQLite: a second server on the same file, a read-only data directory and a full disk each get
// one clear line at start (exit 2) or a coded error per request; the database is never damaged.

const admin = "drv_u_sqlite-faults.0123456789abcdefghij0123456789ab";
const cleanups: Array<() => void> = [];
after(() => {
  for (const c of cleanups.reverse()) {
    try {
      c();
    } catch {
      // Keep cleaning up.
    }
  }
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "drover-sqlite-faults-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs `drover server` expecting it to refuse to start; returns its exit code and output. */
async function refusedStart(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const proc = spawnDrover(["server"], {
    ...process.env,
    DROVER_PORT: "0",
    DROVER_ADMIN_TOKEN: admin,
    DROVER_LOG_LEVEL: "warn",
    ...env,
  });
  const exit = await proc.exited;
  return { code: exit.code, output: proc.output() };
}

function integrity(dbPath: string): string {
  const db = new BetterSqlite3(dbPath, { readonly: true });
  try {
    return String(db.pragma("integrity_check", { simple: true }));
  } finally {
    db.close();
  }
}

/** A small tmpfs the test controls (at `at`, else a new directory), or the reason it cannot have one. */
function mountTmpfs(sizeKb: number, at?: string): { dir: string } | { skip: string } {
  if (process.getuid?.() !== 0) return { skip: "needs root to mount a tmpfs" };
  const dir = at ?? tempDir();
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${sizeKb}k,mode=0755`, "tmpfs", dir], { stdio: "pipe" });
  } catch (err) {
    return { skip: `mount -t tmpfs is not permitted here: ${String(err).split("\n")[0]}` };
  }
  cleanups.push(() => execFileSync("umount", ["-l", dir], { stdio: "pipe" }));
  return { dir };
}

/** Calls a server's TFE API: a path under it, or an upload URL it gave (those take no token). */
function tfeOf(serverUrl: string) {
  return async (method: string, path: string, body?: string | Buffer, token: string | null = admin) => {
    // The TFE API is not in the protocol's route table (decision 0068): the typed client cannot call it.
    // eslint-disable-next-line no-restricted-globals
    const res = await fetch(path.startsWith("http") ? path : `${serverUrl}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        "content-type": typeof body === "string" ? "application/vnd.api+json" : "application/octet-stream",
      },
      ...(body === undefined ? {} : { body }),
    });
    const text = await res.text();
    return { status: res.status, text, json: text === "" ? undefined : (JSON.parse(text) as any) };
  };
}

/** A server on `dataDir` with the TFE API on (organization acme) and one workspace `name`, reached through it. */
async function tfeWorkspace(dataDir: string, name: string) {
  const server = await startServerProc({
    DROVER_DATA_DIR: dataDir,
    DROVER_ADMIN_TOKEN: admin,
    DROVER_TFE_ORGANIZATION: "acme",
  });
  cleanups.push(() => server.proc.child.kill("SIGKILL"));
  await callOk(server.url, routes.createPool, admin, { body: { name: "tfe" } });
  await callOk(server.url, routes.createWorkspace, admin, { body: { name, pool: "tfe" } });
  const tfe = tfeOf(server.url);
  const ws = await tfe("GET", `/api/v2/organizations/acme/workspaces/${name}`);
  return { server, tfe, workspaceId: ws.json.data.id as string };
}

/** Writes `path` until its file system is full to the last byte. */
function fillUp(path: string): void {
  const fd = openSync(path, "w");
  try {
    const block = Buffer.alloc(64 * 1024, 1);
    for (;;) writeSync(fd, block);
  } catch (err) {
    assert.equal((err as NodeJS.ErrnoException).code, "ENOSPC");
  } finally {
    closeSync(fd);
  }
}

describe("a second server on the same SQLite file", () => {
  test("is refused with one line and exit 2; a lock left by a killed server is taken over", async () => {
    const dataDir = join(tempDir(), "data");
    const first = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    cleanups.push(() => first.proc.child.kill("SIGKILL"));
    const second = await refusedStart({ DROVER_DATA_DIR: dataDir });
    assert.equal(second.code, 2, second.output);
    const lines = second.output.trim().split("\n");
    assert.equal(lines.length, 1, `one line:\n${second.output}`);
    assert.match(
      lines[0]!,
      new RegExp(
        `^drover server: another Drover server \\(pid ${first.proc.child.pid} on .*\\) is using the SQLite database .*drover\\.db`,
      ),
    );
    // The first server is undisturbed.
    await callOk(first.url, routes.createPool, admin, { body: { name: "still-mine" } });

    await first.proc.stop("SIGKILL");
    assert.ok(existsSync(join(dataDir, "drover.db.lock")), "kill -9 leaves the lock file behind");
    const third = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    const pools = await callOk(third.url, routes.listPools, admin);
    assert.ok(pools.items.some((p: { name: string }) => p.name === "still-mine"));
    await third.proc.stop("SIGTERM");
    assert.ok(!existsSync(join(dataDir, "drover.db.lock")), "a clean stop removes the lock");
    assert.equal(integrity(join(dataDir, "drover.db")), "ok");
  });
});

describe("a read-only data directory", () => {
  test("stops the server at start with one line and exit 2", async (t) => {
    const mount = mountTmpfs(8192);
    if ("skip" in mount) return t.skip(mount.skip);
    const dataDir = join(mount.dir, "data");
    const server = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    await callOk(server.url, routes.createPool, admin, { body: { name: "before-ro" } });
    await server.proc.stop("SIGTERM");
    execFileSync("mount", ["-o", "remount,ro", mount.dir], { stdio: "pipe" });

    const refused = await refusedStart({ DROVER_DATA_DIR: dataDir });
    assert.equal(refused.code, 2, refused.output);
    const lines = refused.output.trim().split("\n");
    assert.equal(lines.length, 1, `one line:\n${refused.output}`);
    assert.match(
      lines[0]!,
      /^drover server: the database in .* cannot be written \(EROFS: .*\); make the directory and its files writable/,
    );

    execFileSync("mount", ["-o", "remount,rw", mount.dir], { stdio: "pipe" });
    assert.equal(integrity(join(dataDir, "drover.db")), "ok");
    const again = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    const pools = await callOk(again.url, routes.listPools, admin);
    assert.ok(pools.items.some((p: { name: string }) => p.name === "before-ro"));
    await again.proc.stop("SIGTERM");
  });
});

describe("a database that turns read-only while the server runs", () => {
  test("each write answers 503 database_read_only with Retry-After; reads keep working; writes resume when it is writable again", async (t) => {
    const dataDir = join(tempDir(), "data");
    const server = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    cleanups.push(() => server.proc.child.kill("SIGKILL"));
    await callOk(server.url, routes.createPool, admin, { body: { name: "before" } });
    // Root ignores file modes and a file system with open writers cannot be remounted read-only,
    // but an immutable file refuses writes even through descriptors already open.
    const files = ["drover.db", "drover.db-wal"].map((f) => join(dataDir, f));
    try {
      execFileSync("chattr", ["+i", ...files], { stdio: "pipe" });
    } catch (err) {
      return t.skip(`chattr +i is not available here: ${String(err).split("\n")[0]}`);
    }
    cleanups.push(() => execFileSync("chattr", ["-i", ...files], { stdio: "pipe" }));
    const refused = await call(server.url, routes.createPool, admin, { body: { name: "during" } });
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.error, "database_read_only");
    assert.match(refused.body.message, /cannot be written|writing the database .* failed/);
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    assert.equal((await call(server.url, routes.listPools, admin)).status, 200, "reads still work");
    assert.equal(server.proc.child.exitCode, null, "the server stays up");

    execFileSync("chattr", ["-i", ...files], { stdio: "pipe" });
    const after = await call(server.url, routes.createPool, admin, { body: { name: "after" } });
    assert.equal(after.status, 201, `writes resume without a restart: ${JSON.stringify(after.body)}`);
    await server.proc.stop("SIGTERM");
    assert.equal(integrity(join(dataDir, "drover.db")), "ok");
    const db = new BetterSqlite3(join(dataDir, "drover.db"), { readonly: true });
    const names = (db.prepare("select name from pools order by name").all() as Array<{ name: string }>).map(
      (r) => r.name,
    );
    db.close();
    assert.deepEqual(names, ["after", "before"], "the refused write left nothing behind");
  });
});

describe("a full data directory", () => {
  test("fails each write with 507 storage_full and Retry-After, keeps serving reads, resumes once space is freed", async (t) => {
    const mount = mountTmpfs(4096);
    if ("skip" in mount) return t.skip(mount.skip);
    const dataDir = join(mount.dir, "data");
    const ballast = join(mount.dir, "ballast");
    const server = await startServerProc({ DROVER_DATA_DIR: dataDir, DROVER_ADMIN_TOKEN: admin });
    cleanups.push(() => server.proc.child.kill("SIGKILL"));
    await callOk(server.url, routes.createPool, admin, { body: { name: "full" } });
    await callOk(server.url, routes.createWorkspace, admin, { body: { name: "full", pool: "full" } });
    // Most of the space goes to a file the test can delete later.
    writeFileSync(ballast, randomBytes(1536 * 1024));

    let stored = 0;
    let refused: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 40 && !refused; i++) {
      const archive = rawTarGz([{ path: "main.tf", content: randomBytes(192 * 1024).toString("base64") }]);
      const res = await call(server.url, routes.uploadConfiguration, admin, { params: { ws: "full" }, body: archive });
      if (res.status === 201) stored++;
      else refused = res;
    }
    assert.ok(refused, "the disk filled up");
    assert.equal(refused.status, 507, JSON.stringify(refused.body));
    assert.equal(refused.body.error, "storage_full");
    assert.match(refused.body.message, /the data directory .* is full .*free space there/);
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    assert.equal(server.proc.child.exitCode, null, "the server stays up");
    assert.equal(
      (await call(server.url, routes.getWorkspace, admin, { params: { ws: "full" } })).status,
      200,
      "reads still work",
    );

    rmSync(ballast);
    const after = await call(server.url, routes.uploadConfiguration, admin, {
      params: { ws: "full" },
      body: rawTarGz([{ path: "main.tf", content: "" }]),
    });
    assert.equal(after.status, 201, `writes resume without a restart: ${JSON.stringify(after.body)}`);
    await server.proc.stop("SIGTERM");

    const dbPath = join(dataDir, "drover.db");
    assert.equal(integrity(dbPath), "ok");
    const db = new BetterSqlite3(dbPath, { readonly: true });
    const count = (db.prepare("select count(*) as n from configuration_versions").get() as { n: number }).n;
    db.close();
    assert.equal(count, stored + 1, "every accepted upload is there, the refused one is not");
  });

  test("a TFE upload URL refused for a full disk works again once space is freed: the failed write did not spend it", async (t) => {
    const mount = mountTmpfs(4096);
    if ("skip" in mount) return t.skip(mount.skip);
    const dataDir = join(mount.dir, "data");
    const ballast = join(mount.dir, "ballast");
    // Bodies in flight have room of their own: the upload reaches the handler, whose write fails.
    mkdirSync(join(dataDir, "uploads"), { recursive: true });
    const uploads = mountTmpfs(16 * 1024, join(dataDir, "uploads"));
    if ("skip" in uploads) return t.skip(uploads.skip);
    const { server, tfe, workspaceId } = await tfeWorkspace(dataDir, "tfe-full");
    const cv = await tfe(
      "POST",
      `/api/v2/workspaces/${workspaceId}/configuration-versions`,
      JSON.stringify({ data: { type: "configuration-versions", attributes: { "auto-queue-runs": false } } }),
    );
    assert.equal(cv.status, 201, cv.text);
    const uploadUrl = cv.json.data.attributes["upload-url"] as string;
    // Fill the disk, then free a little: room for the URL's use to be recorded, none for the archive.
    fillUp(ballast);
    truncateSync(ballast, statSync(ballast).size - 128 * 1024);
    const archive = rawTarGz([{ path: "main.tf", content: randomBytes(768 * 1024).toString("base64") }]);
    const full = await tfe("PUT", uploadUrl, archive, null);
    assert.equal(full.status, 507, full.text + server.proc.output());

    rmSync(ballast);
    // go-tfe retries a 5xx with the same URL.
    const retried = await tfe("PUT", uploadUrl, archive, null);
    assert.equal(retried.status, 200, retried.text);
    assert.equal((await tfe("PUT", uploadUrl, archive, null)).status, 403, "spent by the upload that happened");
    const read = await tfe("GET", `/api/v2/configuration-versions/${cv.json.data.id as string}`);
    assert.equal(read.json.data.attributes.status, "uploaded");
  });

  test("a TFE JSON state upload, which Drover does not keep, is read and dropped: it needs no room on disk", async (t) => {
    const dataDir = join(tempDir(), "data");
    mkdirSync(join(dataDir, "uploads"), { recursive: true });
    const uploads = mountTmpfs(1024, join(dataDir, "uploads"));
    if ("skip" in uploads) return t.skip(uploads.skip);
    const { server, tfe, workspaceId } = await tfeWorkspace(dataDir, "tfe-json");
    // Both bodies are twice the room the upload directory has.
    const padding = "x".repeat(2 * 1024 * 1024);
    const state = JSON.stringify({ version: 4, serial: 1, lineage: "l", outputs: {}, resources: [], padding });
    const md5 = createHash("md5").update(state).digest("hex");
    const version = await tfe(
      "POST",
      `/api/v2/workspaces/${workspaceId}/state-versions`,
      JSON.stringify({ data: { type: "state-versions", attributes: { serial: 1, md5, lineage: "l" } } }),
    );
    assert.equal(version.status, 201, version.text);
    const { attributes } = version.json.data;
    const json = await tfe("PUT", attributes["hosted-json-state-upload-url"] as string, Buffer.from(state), null);
    assert.equal(json.status, 200, json.text + server.proc.output());
    // The raw state is kept: it goes through the upload directory, which has no room for it.
    const raw = await tfe("PUT", attributes["hosted-state-upload-url"] as string, Buffer.from(state), null);
    assert.equal(raw.status, 507, raw.text);
  });

  test("stops the server at start with one line and exit 2", async (t) => {
    const mount = mountTmpfs(1024);
    if ("skip" in mount) return t.skip(mount.skip);
    // Fill the file system to the last byte.
    fillUp(join(mount.dir, "ballast"));
    const dataDir = join(mount.dir, "data");
    mkdirSync(dataDir);
    const refused = await refusedStart({ DROVER_DATA_DIR: dataDir });
    assert.equal(refused.code, 2, refused.output);
    const lines = refused.output.trim().split("\n");
    assert.equal(lines.length, 1, `one line:\n${refused.output}`);
    assert.match(lines[0]!, /^drover server: the data directory .* is full \((ENOSPC|SQLITE_FULL)/);
  });
});
