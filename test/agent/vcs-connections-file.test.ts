import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { parseVcsConnections } from "@drover/agent/vcs";

/*
 * A VCS agent's connections file with a GitHub App: the key is read from its file (a relative
 * path from the connections file's folder), and every problem is one line naming the file and
 * the connection, never the key's content.
 */

const dir = mkdtempSync(join(tmpdir(), "drover-vcs-file-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const privateKey = generateKeyPairSync("rsa", { modulusLength: 2048 })
  .privateKey.export({ type: "pkcs1", format: "pem" })
  .toString();
mkdirSync(join(dir, "keys"));
writeFileSync(join(dir, "keys", "app.pem"), privateKey);
const source = join(dir, "connections.json");
const parse = (c: object) => parseVcsConnections(JSON.stringify({ ghe: c }), source);
const app = (extra: object = {}) => ({
  provider: "github",
  url: "https://ghe.internal",
  githubApp: { appId: "777", installationId: 4242, privateKeyFile: "keys/app.pem", ...extra },
});

test("a GitHub App connection reads its key from a path relative to the connections file", () => {
  const ghe = parse(app()).get("ghe");
  assert.deepEqual(ghe?.auth, { kind: "github-app", appId: "777", installationId: 4242, privateKey });
  assert.equal(ghe?.apiUrl, "https://ghe.internal/api/v3");
  const absolute = parse(app({ privateKeyFile: join(dir, "keys", "app.pem") })).get("ghe");
  assert.equal(absolute?.auth.kind, "github-app");
});

test("a bad GitHub App entry is one line naming the file and the connection, never the key", () => {
  const refused = (c: object, why: RegExp) =>
    assert.throws(
      () => parse(c),
      (err: Error) => {
        assert.match(err.message, why);
        assert.ok(err.message.includes(source), err.message);
        assert.ok(!err.message.includes("PRIVATE KEY"), err.message);
        assert.equal(err.message.split("\n").length, 1, err.message);
        return true;
      },
    );
  refused(app({ privateKeyFile: "keys/missing.pem" }), /ghe\.githubApp\.privateKeyFile .*missing\.pem cannot be read/);
  writeFileSync(join(dir, "keys", "not-a-key.pem"), "ghp_notakey");
  refused(app({ privateKeyFile: "keys/not-a-key.pem" }), /not-a-key\.pem is not a PEM private key/);
  refused({ ...app(), token: "ghp_token0123456789" }, /give a token or a githubApp, one of them/);
  refused({ provider: "github", url: "https://ghe.internal" }, /give a token or a githubApp, one of them/);
  refused({ ...app(), provider: "gitlab" }, /a GitHub App authenticates to GitHub only/);
  refused(app({ appId: "seven" }), /a GitHub App id/);
  refused(app({ installationId: -1 }), /installationId/);
  refused(app({ privateKey: privateKey }), /githubApp/);
});
