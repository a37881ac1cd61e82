import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { csrfHeader, routes, webSessionCookie } from "@drover/protocol";
import { startTestServer, type TestServer } from "../support/server.js";
import { rawCall, routeCall } from "../support/typed-api.js";

/*
 * Browser sign-in over real HTTP: an API token buys a session cookie that works on the user API
 * like the token; a change made with the cookie needs the CSRF token; another site can neither
 * use the cookie nor sign the browser in; signing out, or revoking the token, ends it.
 */

let server: TestServer;
before(async () => {
  server = await startTestServer();
});
after(() => server?.stop());

/** Signs in with `token`; returns the answer, the cookie pair to send back, and the Set-Cookie attributes. */
async function signIn(token: string, headers: Record<string, string> = {}) {
  const res = await routeCall(server.url, routes.createWebSession, { body: { token }, headers });
  const setCookie = res.headers.get("set-cookie") ?? "";
  const [pair = "", ...attributes] = setCookie.split(/;\s*/);
  return { res, cookie: pair, attributes, csrf: res.body?.csrfToken as string };
}

const poolNames = async () =>
  ((await server.api(routes.listPools)).body.items as { name: string }[]).map((p) => p.name);

describe("a signed-in browser", () => {
  test("gets an HttpOnly, SameSite=Strict cookie for the session's life, and uses the API with it", async () => {
    const { res, cookie, attributes, csrf } = await signIn(server.adminToken);
    assert.equal(res.status, 201);
    assert.match(cookie, new RegExp(`^${webSessionCookie}=drv_w_`));
    assert.deepEqual(attributes.sort(), ["HttpOnly", "Max-Age=43200", "Path=/", "SameSite=Strict"]);
    assert.equal(res.headers.get("cache-control"), "no-store");
    assert.ok(csrf.length >= 40);
    assert.ok(!JSON.stringify(res.body).includes(cookie.split("=")[1]!), "the session token is only in the cookie");

    const listed = await routeCall(server.url, routes.listPools, { headers: { cookie } });
    assert.equal(listed.status, 200);
    const again = await routeCall(server.url, routes.getWebSession, { headers: { cookie } });
    assert.equal(again.status, 200);
    assert.equal(again.body.csrfToken, csrf, "a reloaded page gets the same CSRF token");
  });

  test("changes nothing with the cookie alone: a change needs the session's CSRF token", async () => {
    const { cookie, csrf } = await signIn(server.adminToken);
    const attempts: Record<string, string>[] = [
      { cookie },
      { cookie, [csrfHeader]: "0".repeat(csrf.length) },
      { cookie, [csrfHeader]: "" },
    ];
    for (const headers of attempts) {
      const refused = await routeCall(server.url, routes.createPool, { headers, body: { name: "forged" } });
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error, "forbidden");
      assert.match(refused.body.message, new RegExp(csrfHeader));
    }
    assert.ok(!(await poolNames()).includes("forged"), "no refused request created anything");

    const made = await routeCall(server.url, routes.createPool, {
      headers: { cookie, [csrfHeader]: csrf },
      body: { name: "from-browser" },
    });
    assert.equal(made.status, 201);
    assert.ok((await poolNames()).includes("from-browser"));
  });

  test("another site's form post with the cookie is refused before its body is read", async () => {
    const { cookie } = await signIn(server.adminToken);
    const res = await rawCall(server.url, "POST", routes.createPool.path, undefined, "name=cross-site", {
      cookie,
      origin: "https://attacker.example",
      "content-type": "application/x-www-form-urlencoded",
    });
    assert.equal(res.status, 403);
    assert.ok(!(await poolNames()).includes("cross-site"));
  });

  test("signing out ends the session (with the CSRF token) and clears the cookie", async () => {
    const { cookie, csrf } = await signIn(server.adminToken);
    const withoutCsrf = await routeCall(server.url, routes.deleteWebSession, { headers: { cookie } });
    assert.equal(withoutCsrf.status, 403, "another site cannot sign the browser out either");
    const out = await routeCall(server.url, routes.deleteWebSession, { headers: { cookie, [csrfHeader]: csrf } });
    assert.equal(out.status, 204);
    assert.match(out.headers.get("set-cookie") ?? "", new RegExp(`^${webSessionCookie}=; .*Max-Age=0`));
    const after = await routeCall(server.url, routes.listPools, { headers: { cookie } });
    assert.equal(after.status, 401);
    assert.match(after.body.message, /signed out/);
  });

  test("revoking the API token it signed in with ends the session", async () => {
    const made = await server.api(routes.createUserToken, { body: { description: "browser" } });
    const { cookie } = await signIn(made.body.token);
    assert.equal((await routeCall(server.url, routes.listPools, { headers: { cookie } })).status, 200);
    await server.api(routes.revokeUserToken, { params: { id: made.body.id } });
    const refused = await routeCall(server.url, routes.listPools, { headers: { cookie } });
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error, "token_revoked");
  });
});

describe("sign-in refuses", () => {
  test("a wrong token, without setting a cookie", async () => {
    const { res } = await signIn("drv_u_nobody.0123456789abcdefghij0123456789ab");
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("set-cookie"), null);
  });

  test("a request from another site's page (login CSRF)", async () => {
    const { res } = await signIn(server.adminToken, { origin: "https://attacker.example" });
    assert.equal(res.status, 403);
    assert.equal(res.headers.get("set-cookie"), null);
    const own = await signIn(server.adminToken, { origin: server.url });
    assert.equal(own.res.status, 201, "the server's own pages sign in");
  });

  test("nothing from the server's own pages behind a proxy that does not pass the Host on", async () => {
    // The browser's Origin is the public URL; the Host that reaches the server is its own address.
    const proxied = await startTestServer({ DROVER_PUBLIC_URL: "https://localhost:0" });
    try {
      const publicOrigin = new URL(proxied.url).origin;
      const direct = publicOrigin.replace("https://localhost", "http://127.0.0.1");
      const from = (origin: string) =>
        routeCall(direct, routes.createWebSession, { body: { token: proxied.adminToken }, headers: { origin } });
      assert.equal((await from(publicOrigin)).status, 201, "a page of the public URL signs in");
      assert.equal((await from("https://attacker.example")).status, 403);
      assert.equal((await from(publicOrigin.replace("https:", "http:"))).status, 403, "the scheme counts too");
    } finally {
      await proxied.stop();
    }
  });

  test("a session token sent as a bearer token, and a cookie of nonsense", async () => {
    const { cookie } = await signIn(server.adminToken);
    const bearer = await routeCall(server.url, routes.listPools, { token: cookie.split("=")[1]! });
    assert.equal(bearer.status, 403);
    assert.match(bearer.body.message, /works only as its cookie/);
    const junk = await routeCall(server.url, routes.listPools, { headers: { cookie: `${webSessionCookie}=junk` } });
    assert.equal(junk.status, 401);
  });
});

test("behind a TLS-terminating proxy (an https public URL), the cookie is Secure", async () => {
  // Port 0: the public URL learns the port picked; the test calls that port in plain HTTP, as the proxy would.
  const tls = await startTestServer({ DROVER_PUBLIC_URL: "https://127.0.0.1:0", DROVER_WEB_SESSION_HOURS: "2" });
  try {
    const behindProxy = tls.url.replace(/^https:/, "http:");
    const res = await routeCall(behindProxy, routes.createWebSession, { body: { token: tls.adminToken } });
    assert.equal(res.status, 201);
    const attributes = (res.headers.get("set-cookie") ?? "").split(/;\s*/).slice(1);
    assert.ok(attributes.includes("Secure"));
    assert.ok(attributes.includes("Max-Age=7200"), "DROVER_WEB_SESSION_HOURS sets the cookie's life");
  } finally {
    await tls.stop();
  }
});
