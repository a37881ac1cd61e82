import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  accessSync,
  constants,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { terraformEnv } from "../support/terraform.js";
import { rawCall, routeCall } from "../support/typed-api.js";

// A fresh clone gets a working `drover` from `npm ci`, and the commands the README and the
// quickstart print run as written.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const readJson = (path: string) => JSON.parse(readFileSync(join(root, path), "utf8")) as Record<string, unknown>;
const bin = join(root, "node_modules", ".bin", "drover");

describe("install", () => {
  test("the CLI's bin is a committed file that npm links at install time, and the lock agrees", () => {
    const cli = readJson("packages/cli/package.json") as { bin: Record<string, string> };
    assert.equal(cli.bin.drover, "./bin/drover.js");
    accessSync(join(root, "packages", "cli", "bin", "drover.js"), constants.X_OK);
    const rootPkg = readJson("package.json") as { devDependencies: Record<string, string> };
    assert.ok(
      rootPkg.devDependencies["@drover/cli"],
      "the root depends on @drover/cli, so its bin lands in node_modules/.bin",
    );
    const lock = readJson("package-lock.json") as {
      packages: Record<string, { bin?: Record<string, string>; devDependencies?: Record<string, string> }>;
    };
    assert.equal(
      lock.packages["packages/cli"]?.bin?.drover,
      "bin/drover.js",
      "package-lock.json is up to date (run npm install)",
    );
    assert.equal(lock.packages[""]?.devDependencies?.["@drover/cli"], rootPkg.devDependencies["@drover/cli"]);
  });

  test("node_modules/.bin/drover exists after install and `drover --help` runs", () => {
    assert.equal(realpathSync(bin), join(realpathSync(root), "packages", "cli", "bin", "drover.js"));
    const r = spawnSync(bin, ["--help"], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^Usage: drover /);
    assert.match(r.stdout, /quickstart/);
  });

  test("before a build the command says how to build the CLI", () => {
    const dir = mkdtempSync(join(tmpdir(), "drover-bin-"));
    try {
      mkdirSync(join(dir, "bin"));
      copyFileSync(join(root, "packages", "cli", "bin", "drover.js"), join(dir, "bin", "drover.mjs"));
      const r = spawnSync(process.execPath, [join(dir, "bin", "drover.mjs"), "--help"], { encoding: "utf8" });
      assert.equal(r.status, 1);
      assert.match(
        r.stderr,
        /drover: the CLI is not built \(.*dist\/src\/main\.js is missing\)\. Run `npm run build` in the Drover repository/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the commands the quickstart prints run as written", async () => {
    const dir = mkdtempSync(join(tmpdir(), "drover-quickstart-"));
    const env = terraformEnv(dir, {
      DROVER_CONFIG_DIR: join(dir, "config"),
      DROVER_AGENT_NAME: `quickstart-${process.pid}`,
    });
    const quickstart = spawn(bin, ["quickstart", "--data-dir", join(dir, "data"), "--port", "0"], {
      cwd: root,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) => quickstart.on("exit", (code) => resolve(code)));
    try {
      let printed = "";
      quickstart.stderr.on("data", (d: Buffer) => (printed += d.toString()));
      await new Promise<void>((resolve, reject) => {
        quickstart.stdout.on("data", (d: Buffer) => {
          printed += d.toString();
          if (printed.includes("Press Ctrl-C to stop.")) resolve();
        });
        void exited.then((code) => reject(new Error(`quickstart exited ${code} before it was ready:\n${printed}`)));
      });
      const commands = printed
        .split("\n")
        .filter((l) => l.startsWith("  npx drover "))
        .map((l) => l.trim());
      assert.equal(commands.length, 3, printed);
      assert.equal(commands[0], "npx drover run start examples/hello --workspace hello --auto-apply");
      const shell = (line: string) => spawnSync("sh", ["-c", line], { cwd: root, env, encoding: "utf8" });
      const started = shell(commands[0]!);
      assert.equal(started.status, 0, started.stdout + started.stderr);
      assert.match(started.stdout, /Hello from Drover, from run run-/);
      assert.match(started.stdout, /: applied/);
      const output = shell(commands[1]!);
      assert.equal(output.status, 0, output.stderr);
      assert.match(output.stdout, /Hello from Drover/);

      // The web UI's address and sign-in link it prints: the page is served, the link's token signs in.
      const link = /(http:\/\/\S+)\/app#token=(\S+)/.exec(printed);
      assert.ok(link, printed);
      const [, base, token] = link;
      const page = await rawCall(base!, "GET", "/app", undefined);
      assert.equal(page.status, 200);
      assert.match(String(page.body), /<div id="app">/);
      const session = await routeCall(base!, routes.createWebSession, { body: { token: decodeURIComponent(token!) } });
      assert.equal(session.status, 201, JSON.stringify(session.body));
    } finally {
      quickstart.kill("SIGINT");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
