import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { startStack, type Stack } from "../support/stack.js";
import { linkArgs } from "../support/vcs-cli.js";

/*
 * A GitHub App connection made with the CLI: the server mints an installation token with the
 * app's key (the stand-in checks the JWT's issuer and RS256 signature) and registers the webhook
 * with it; the key is shown by nothing.
 */

let stack: Stack;
let gh: GithubApi;
const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
const privateKey = keys.privateKey.export({ type: "pkcs1", format: "pem" }).toString();

before(async () => {
  gh = await startGithubApi({
    app: {
      appId: "777",
      installationId: 4242,
      publicKey: keys.publicKey.export({ type: "spki", format: "pem" }).toString(),
    },
    prefix: "/api/v3",
  });
  gh.addRepo("org/infra");
  stack = await startStack();
});
after(async () => {
  await stack?.stop();
  await gh?.close();
});

test("drover vcs connect --app-id …: the link's webhook is registered with a minted installation token", async () => {
  const keyFile = join(stack.dir, "app.pem");
  writeFileSync(keyFile, privateKey);
  const connected = await stack.cli([
    "vcs",
    "connect",
    "app",
    "--provider",
    "github",
    "--vcs-url",
    gh.url,
    "--api-url",
    gh.apiUrl,
    "--app-id",
    "777",
    "--installation-id",
    "4242",
    "--private-key-file",
    keyFile,
  ]);
  assert.equal(connected.code, 0, connected.stderr);
  assert.match(connected.stdout, /as GitHub App 777/);
  await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool } });
  const linked = await stack.cli(linkArgs("infra", "app", "org/infra", "main"));
  assert.equal(linked.code, 0, linked.stderr);
  assert.match(linked.stdout, /Webhook registered/);
  assert.ok(gh.calls.some((c) => c.method === "POST" && c.path === "/api/v3/app/installations/4242/access_tokens"));
  const [minted] = [...gh.minted];
  const hookCall = gh.calls.find((c) => c.path === "/api/v3/repos/org/infra/hooks");
  assert.equal(hookCall?.headers.authorization, `token ${minted}`);
  assert.equal(gh.repos.get("org/infra")!.hooks.size, 1);

  const shown = JSON.stringify([
    (await stack.server.api(routes.getVcsConnection, { params: { connection: "app" } })).body,
    (await stack.cli(["vcs", "list", "--json"])).stdout,
    connected.stdout,
  ]);
  assert.ok(!shown.includes("PRIVATE KEY") && !shown.includes(minted!), shown);
  assert.match(shown, /"authKind":"github-app"/);

  // Half an app is refused before anything is sent.
  const half = await stack.cli([
    "vcs",
    "connect",
    "half",
    "--provider",
    "github",
    "--vcs-url",
    gh.url,
    "--app-id",
    "1",
  ]);
  assert.notEqual(half.code, 0);
  assert.match(half.stderr, /a GitHub App needs all of --app-id, --installation-id and --private-key-file/);
});
