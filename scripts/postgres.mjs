// A throwaway PostgreSQL cluster in a temp dir, for tests and benchmarks.
// PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres` user
// (created by Debian's package) or `nobody`.
import { execFileSync, spawnSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

function findBin(name) {
  const candidates = [`/usr/local/bin/${name}`];
  if (existsSync("/usr/lib/postgresql")) {
    for (const v of readdirSync("/usr/lib/postgresql").sort().reverse())
      candidates.push(`/usr/lib/postgresql/${v}/bin/${name}`);
  }
  const found = candidates.find((p) => existsSync(p));
  if (!found) throw new Error(`PostgreSQL's ${name} was not found; install the postgresql package (.ci/run does)`);
  return found;
}

function runAsUser() {
  if (process.getuid?.() !== 0) return undefined;
  for (const user of ["postgres", "nobody"]) {
    const r = spawnSync("id", ["-u", user], { encoding: "utf8" });
    if (r.status === 0) {
      const uid = Number(r.stdout.trim());
      const gid = Number(spawnSync("id", ["-g", user], { encoding: "utf8" }).stdout.trim());
      return { user, uid, gid };
    }
  }
  throw new Error("running as root and no postgres or nobody user exists to run PostgreSQL");
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = srv.address().port;
      srv.close(() => resolve(port));
    });
  });
}

/** Starts a cluster; returns { url, stop() } where url connects as superuser `drover`. */
export async function startPostgres() {
  const as = runAsUser();
  const dir = mkdtempSync(join(tmpdir(), "drover-pg-"));
  if (as) chownSync(dir, as.uid, as.gid);
  const wrap = (bin, args) =>
    as ? ["setpriv", [`--reuid=${as.uid}`, `--regid=${as.gid}`, "--clear-groups", bin, ...args]] : [bin, args];
  const data = join(dir, "data");
  const [c1, a1] = wrap(findBin("initdb"), ["-D", data, "-U", "drover", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  execFileSync(c1, a1, { stdio: "pipe", cwd: dir });
  const port = await freePort();
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300`;
  const [c2, a2] = wrap(findBin("pg_ctl"), ["-D", data, "-o", opts, "-l", join(dir, "log"), "-w", "start"]);
  execFileSync(c2, a2, { stdio: "pipe", cwd: dir });
  return {
    url: `postgres://drover@127.0.0.1:${port}/postgres`,
    stop() {
      const [c3, a3] = wrap(findBin("pg_ctl"), ["-D", data, "-m", "immediate", "-w", "stop"]);
      try {
        execFileSync(c3, a3, { stdio: "pipe", cwd: dir });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
