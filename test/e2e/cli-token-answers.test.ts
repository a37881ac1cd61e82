import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runCliInProcess } from "../support/cli.js";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * What the CLI answers a user handling tokens, URLs and workspace settings by hand: a token file
 * made the way the README shows works, and a value that cannot be right is refused by the CLI,
 * before any request, naming the flag or variable, with exit 2 like any usage error.
 */

let server: TestServer;
let dir: string;
let asAdmin: Record<string, string>;

before(async () => {
  server = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "drover-cli-tokens-"));
  asAdmin = { DROVER_URL: server.url, DROVER_TOKEN: server.adminToken };
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The CLI with its own config dir, no credentials file, and `env` on top. */
const cli = (args: string[], env: Record<string, string> = {}) =>
  runCliInProcess(args, { PATH: process.env.PATH, HOME: dir, DROVER_CONFIG_DIR: dir, ...env });

test("user-token create prints the token alone, so `> file` makes a file `login --token-file` takes", async () => {
  const created = await cli(["user-token", "create", "--description", "ci"], asAdmin);
  assert.equal(created.code, 0, created.stderr);
  assert.match(created.stdout, /^drv_\S+\n$/, "stdout holds the token and nothing else");
  assert.match(
    created.stderr,
    /is shown once\. Save it to a file.*\n {2}drover login --url <server> --token-file <file>/s,
  );
  const file = join(dir, "ci-token");
  writeFileSync(file, created.stdout);
  const login = await cli(["login", "--url", server.url, "--token-file", file]);
  assert.equal(login.code, 0, login.stderr);
  assert.match(login.stdout, /^Logged in to /);
  const listed = await cli(["pool", "list"]);
  assert.equal(listed.code, 0, listed.stderr);
});

test("a token holding more than one word is refused by name, not reported as an unreachable server", async () => {
  const twoLines = join(dir, "two-lines");
  writeFileSync(twoLines, `${server.adminToken}\n\nThis token is shown once.\n`);
  const login = await cli(["login", "--url", server.url, "--token-file", twoLines]);
  assert.equal(login.code, 2, login.stderr);
  assert.match(login.stderr, /the API token read from .*two-lines holds a space, line break or control character/);
  assert.doesNotMatch(login.stderr, /reach|unreachable/);
  assert.ok(!login.stderr.includes(server.adminToken), "the token is not printed");

  const fromEnv = await cli(["pool", "list"], { DROVER_URL: server.url, DROVER_TOKEN: `${server.adminToken}\nmore` });
  assert.equal(fromEnv.code, 2, fromEnv.stderr);
  assert.match(fromEnv.stderr, /DROVER_TOKEN holds a space, line break or control character/);
  // Around the token, whitespace is dropped: a Kubernetes Secret made from a file keeps its newline.
  const trailing = await cli(["pool", "list"], { DROVER_URL: server.url, DROVER_TOKEN: `${server.adminToken}\n` });
  assert.equal(trailing.code, 0, trailing.stderr);
  const fromFlag = await cli(["pool", "list", "--url", server.url, "--token", `${server.adminToken} x`]);
  assert.equal(fromFlag.code, 2, fromFlag.stderr);
  assert.match(fromFlag.stderr, /--token holds a space/);
});

test("login checks --url as every other command does", async () => {
  for (const url of ["127.0.0.1:8800", "ftp://drover.example.com"]) {
    const login = await cli(["login", "--url", url, "--token", "drv_u_x.y"]);
    assert.equal(login.code, 2, `${url}: ${login.stderr}`);
    assert.match(login.stderr, /--url /, url);
    assert.doesNotMatch(login.stderr, /reach|unreachable/, url);
  }
});

test("user-token create refuses a lifetime that is not 1 to 3650 days before asking the server", async () => {
  for (const days of ["abc", "0", "5000", "1.5"]) {
    const res = await cli(["user-token", "create", "--description", "x", "--expires-in-days", days], asAdmin);
    assert.equal(res.code, 2, `${days}: ${res.stderr}`);
    assert.match(res.stderr, /--expires-in-days must be a whole number from 1 to 3650/, days);
  }
  const { body } = await server.api(routes.listUserTokens, {});
  const made = (body as { items: Array<{ description: string }> }).items;
  assert.ok(!made.some((t) => t.description === "x"), "no token was made");
});

test("workspace update moves a workspace to another pool and changes its engine and version", async () => {
  for (const pool of ["first", "second"]) assert.equal((await cli(["pool", "create", pool], asAdmin)).code, 0);
  assert.equal((await cli(["workspace", "create", "moved", "--pool", "first"], asAdmin)).code, 0);
  const update = ["workspace", "update", "moved", "--pool", "second", "--engine", "tofu", "--engine-version", "1.8.0"];
  const updated = await cli(update, asAdmin);
  assert.equal(updated.code, 0, updated.stderr);
  let ws = (await server.api(routes.getWorkspace, { params: { ws: "moved" } })).body;
  assert.deepEqual([ws.poolName, ws.engine, ws.engineVersion], ["second", "tofu", "1.8.0"]);
  const accented = await cli(["pool", "create", "prød"], asAdmin);
  assert.equal(accented.code, 1, accented.stderr);
  assert.match(accented.stderr, /use ASCII letters \(a-z, A-Z\), digits/);
  // A bad or missing value is a usage error, as a bad flag is: exit 2.
  const nothing = await cli(["workspace", "update", "moved"], asAdmin);
  assert.equal(nothing.code, 2, nothing.stderr);
  assert.match(nothing.stderr, /nothing to change: give --pool, --engine, --engine-version/);
  const notBool = await cli(["workspace", "update", "moved", "--auto-apply", "yes"], asAdmin);
  assert.equal(notBool.code, 2, notBool.stderr);
  assert.match(notBool.stderr, /--auto-apply takes true or false, got "yes"/);
  // An empty version returns to the agents' own, as --runner-image '' does for the image.
  assert.equal((await cli(["workspace", "update", "moved", "--engine-version", ""], asAdmin)).code, 0);
  ws = (await server.api(routes.getWorkspace, { params: { ws: "moved" } })).body;
  assert.equal(ws.engineVersion, null);
  // The pool that no workspace uses now can go, as `pool delete` told the user to arrange.
  const deleted = await cli(["pool", "delete", "first"], asAdmin);
  assert.equal(deleted.code, 0, deleted.stderr);
});

test("set-var and delete-var say which argument is missing", async () => {
  assert.equal((await cli(["pool", "create", "vars-pool"], asAdmin)).code, 0);
  assert.equal((await cli(["workspace", "create", "vars", "--pool", "vars-pool"], asAdmin)).code, 0);
  const oneArgument = await cli(["workspace", "set-var", "vars"], asAdmin);
  assert.equal(oneArgument.code, 2, oneArgument.stderr);
  assert.match(oneArgument.stderr, /one argument, "vars": give the workspace and KEY=VALUE/);
  assert.match(oneArgument.stderr, /drover workspace set-var <workspace> KEY=VALUE, or -w <workspace> KEY=VALUE/);
  const flagOnly = await cli(["workspace", "set-var", "-w", "vars"], asAdmin);
  assert.equal(flagOnly.code, 2, flagOnly.stderr);
  assert.match(flagOnly.stderr, /no KEY=VALUE given/);
  const noKey = await cli(["workspace", "delete-var", "-w", "vars"], asAdmin);
  assert.equal(noKey.code, 2, noKey.stderr);
  assert.match(noKey.stderr, /no KEY given/);
  for (const args of [
    ["workspace", "set-var", "-w", "vars", "region=eu"],
    ["workspace", "set-var", "vars", "zone=a"],
    ["workspace", "delete-var", "-w", "vars", "zone"],
  ]) {
    const done = await cli(args, asAdmin);
    assert.equal(done.code, 0, `${args.join(" ")}: ${done.stderr}`);
  }
  // workspace show keeps one line per variable: a long or multi-line value is cut, --json has it whole.
  const long = "x".repeat(5000);
  await server.api(routes.setVariable, { params: { ws: "vars", key: "long" }, body: { value: long } });
  await server.api(routes.setVariable, { params: { ws: "vars", key: "lines" }, body: { value: "one\ntwo" } });
  const shown = await cli(["workspace", "show", "vars"], asAdmin);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, new RegExp(`^long\\s+terraform\\s+no\\s+x{59}…$`, "m"));
  assert.match(shown.stdout, /^lines\s+terraform\s+no\s+one…$/m);
  assert.doesNotMatch(shown.stdout, /^two/m);
  assert.match(shown.stdout, /--json shows them whole/);
  const whole = JSON.parse((await cli(["workspace", "show", "vars", "--json"], asAdmin)).stdout);
  assert.equal(whole.variables.find((v: { key: string }) => v.key === "long").value, long);
  for (const key of ["long", "lines"]) await server.api(routes.deleteVariable, { params: { ws: "vars", key } });
  // A key of the other kind is named with the flag that reaches it.
  assert.equal((await cli(["workspace", "set-var", "-w", "vars", "MY_ENV=1", "--env"], asAdmin)).code, 0);
  const otherKind = await cli(["workspace", "delete-var", "-w", "vars", "MY_ENV"], asAdmin);
  assert.equal(otherKind.code, 1, otherKind.stderr);
  assert.match(otherKind.stderr, /MY_ENV is an environment variable: add --env\./);
  assert.equal((await cli(["workspace", "delete-var", "-w", "vars", "MY_ENV", "--env"], asAdmin)).code, 0);
  const { body } = await server.api(routes.listVariables, { params: { ws: "vars" } });
  assert.deepEqual(
    (body as { items: Array<{ key: string; value: string }> }).items.map((v) => [v.key, v.value]),
    [["region", "eu"]],
  );
});
