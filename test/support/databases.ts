import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { DatabaseLocation } from "@drover/server";

/** A fresh, empty database of one kind, and how to throw it away. */
export interface TestDatabase {
  location: DatabaseLocation;
  url: string;
  drop(): Promise<void>;
}

export type BackendName = "sqlite" | "postgres";
export const backends: BackendName[] = ["sqlite", "postgres"];

/** The shared test cluster started by scripts/run-tests.mjs. */
export function testClusterUrl(): string {
  const url = process.env.DROVER_TEST_PG_URL;
  if (!url)
    throw new Error("DROVER_TEST_PG_URL is not set: run the tests with `npm test` (it starts a throwaway PostgreSQL)");
  return url;
}

/** Creates a new database: a SQLite file in a temp dir, or a database in the test cluster. */
export async function createTestDatabase(kind: BackendName): Promise<TestDatabase> {
  if (kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "drover-sqlite-"));
    const path = join(dir, "drover.db");
    return {
      location: { kind: "sqlite", path },
      url: `sqlite:${path}`,
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const admin = testClusterUrl();
  const name = `t_${randomBytes(6).toString("hex")}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  await client.query(`CREATE DATABASE ${name}`);
  await client.end();
  const url = admin.replace(/\/[^/]*$/, `/${name}`);
  return {
    location: { kind: "postgres", url },
    url,
    async drop() {
      const c = new pg.Client({ connectionString: admin });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}
