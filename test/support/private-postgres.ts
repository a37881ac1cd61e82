import { execFileSync, spawnSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./processes.js";

/*
 * A PostgreSQL cluster of one test file's own, for tests that restart, stop or terminate it:
 * doing that to the suite's shared cluster would break every other test file running beside.
 * As root the cluster runs as the `postgres` (or `nobody`) user, since PostgreSQL refuses root.
 */

/** A private cluster and the faults a test can inflict on it. */
export interface PrivatePostgres {
  /** Superuser URL of the `postgres` database. */
  url: string;
  /** `pg_ctl restart -m fast`: every connection is terminated (57P01), the cluster comes back. */
  restart(): void;
  /** `pg_ctl stop -m fast`: the database is gone until `start`. */
  stopCluster(): void;
  /** Starts the cluster again after `stopCluster`, on the same port. */
  startCluster(): void;
  /** SIGSTOP to the postmaster and every backend: connections stay open but nothing answers. */
  halt(): void;
  /** SIGCONT after `halt`. */
  resume(): void;
  /** `pg_terminate_backend` of every other backend; returns how many were terminated. */
  terminateBackends(): Promise<number>;
  /** Runs one query as superuser on `database` (default `postgres`). */
  query<T extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
    database?: string,
  ): Promise<T[]>;
  /** Creates a database and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** Stops the cluster and deletes its files. */
  destroy(): void;
}

function findBin(name: string): string {
  const candidates = [`/usr/local/bin/${name}`];
  if (existsSync("/usr/lib/postgresql")) {
    for (const v of readdirSync("/usr/lib/postgresql").sort().reverse())
      candidates.push(`/usr/lib/postgresql/${v}/bin/${name}`);
  }
  const found = candidates.find((p) => existsSync(p));
  if (!found) throw new Error(`PostgreSQL's ${name} was not found`);
  return found;
}

function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  for (const user of ["postgres", "nobody"]) {
    const r = spawnSync("id", ["-u", user], { encoding: "utf8" });
    if (r.status === 0)
      return {
        uid: Number(r.stdout.trim()),
        gid: Number(spawnSync("id", ["-g", user], { encoding: "utf8" }).stdout.trim()),
      };
  }
  throw new Error("running as root and no postgres or nobody user exists to run PostgreSQL");
}

/** Creates and starts a private cluster (fsync off: tests need speed, not durability). */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const as = runAs();
  const dir = mkdtempSync(join(tmpdir(), "drover-private-pg-"));
  if (as) chownSync(dir, as.uid, as.gid);
  const data = join(dir, "data");
  const run = (bin: string, args: string[]) => {
    const [cmd, argv] = as
      ? ["setpriv", [`--reuid=${as.uid}`, `--regid=${as.gid}`, "--clear-groups", findBin(bin), ...args]]
      : [findBin(bin), args];
    execFileSync(cmd as string, argv as string[], { stdio: "pipe", cwd: dir });
  };
  run("initdb", ["-D", data, "-U", "drover", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const port = await freePort();
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100`;
  const ctl = (...args: string[]) =>
    run("pg_ctl", ["-D", data, "-o", opts, "-l", join(dir, "log"), "-w", "-t", "60", ...args]);
  ctl("start");
  const url = `postgres://drover@127.0.0.1:${port}/postgres`;
  const urlOf = (database: string) => url.replace(/\/postgres$/, `/${database}`);
  const query = async <T extends pg.QueryResultRow>(
    text: string,
    values: unknown[] = [],
    database = "postgres",
  ): Promise<T[]> => {
    const client = new pg.Client({ connectionString: urlOf(database) });
    client.on("error", () => undefined);
    await client.connect();
    try {
      return (await client.query<T>(text, values)).rows;
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  let destroyed = false;
  const processes = (): number[] => {
    const postmaster = Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]);
    const children = readdirSync("/proc")
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          const stat = readFileSync(`/proc/${d}/stat`, "utf8");
          return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === postmaster;
        } catch {
          return false;
        }
      })
      .map(Number);
    return [postmaster, ...children];
  };
  return {
    url,
    restart: () => ctl("-m", "fast", "restart"),
    stopCluster: () => ctl("-m", "fast", "stop"),
    startCluster: () => ctl("start"),
    halt() {
      for (const pid of processes()) process.kill(pid, "SIGSTOP");
    },
    resume() {
      for (const pid of processes()) process.kill(pid, "SIGCONT");
    },
    async terminateBackends() {
      const rows = await query<{ n: string }>(
        "select count(*) filter (where pg_terminate_backend(pid)) as n from pg_stat_activity where pid <> pg_backend_pid() and backend_type = 'client backend'",
      );
      return Number(rows[0]?.n ?? 0);
    },
    query,
    async createDatabase(name) {
      await query(`create database ${name}`);
      return urlOf(name);
    },
    destroy() {
      if (destroyed) return;
      destroyed = true;
      try {
        for (const pid of processes()) process.kill(pid, "SIGCONT");
      } catch {
        // Not running.
      }
      try {
        run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]);
      } catch {
        // Already stopped.
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
