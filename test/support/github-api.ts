import { createPublicKey, verify, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { at, checkSchema, type Schema } from "./json-schema-check.js";

/*
 * A GitHub REST API stand-in on 127.0.0.1 for the operations Drover uses. Every call is recorded
 * (method, path, body, headers) so tests assert exactly what Drover sent. Each answer starts
 * from the published example of its operation in GitHub's OpenAPI description
 * (@octokit/openapi), carries the stand-in's own data, and is checked against that operation's
 * response schema before it leaves: an answer outside the description is a 500 and is listed
 * in `invalid`. Like GitHub, a bad token is 401 and an unknown repository 404. With `app`,
 * installation tokens minted by POST /app/installations/:id/access_tokens for a JWT signed (RS256)
 * by the app's key and naming the app as issuer are accepted, beside `token` when one is given.
 */

export interface RecordedCall {
  method: string;
  path: string;
  body: unknown;
  headers: Record<string, string | string[] | undefined>;
}

export interface StandInCommit {
  message: string;
  author: { name: string; email: string };
}

export interface StandInRepo {
  branches: Record<string, string>;
  commits: Record<string, StandInCommit>;
  /** `base...head` → the files the comparison lists. */
  compare: Record<string, string[]>;
  statuses: { sha: string; state: string; context: string; description: string; targetUrl: string }[];
  comments: Map<number, { issue: number; body: string }>;
  hooks: Map<number, { url: string; secret: string; events: string[]; contentType: string }>;
}

export interface GithubApiOptions {
  /** The one token accepted (token auth). */
  token?: string;
  /** GitHub App auth: the app id, its installation, and the public half of its key (PEM). */
  app?: { appId: string; installationId: number; publicKey: string };
  /** Where the API lives under the server: "" (api.github.com) or "/api/v3" (Enterprise Server). */
  prefix?: string;
}

let description: Schema | undefined;
function githubDescription(): Schema {
  const require = createRequire(import.meta.url);
  const path = require.resolve("@octokit/openapi/generated/api.github.com.json");
  description ??= JSON.parse(readFileSync(path, "utf8")) as Schema;
  return description;
}

const clone = <T>(v: T): T => structuredClone(v);

export async function startGithubApi(options: GithubApiOptions) {
  const doc = githubDescription();
  const prefix = options.prefix ?? "";
  const calls: RecordedCall[] = [];
  const invalid: string[] = [];
  const repos = new Map<string, StandInRepo>();
  const minted = new Set<string>();
  /** Faults: the API answers 503; webhooks are forbidden; this many comment creations lose their answer. */
  const state = { down: false, forbidHooks: false, loseCommentAnswers: 0, nextId: 1_000_000 };
  /** Repositories whose webhook creations wait: the test learns one arrived, and lets it go on. */
  const heldHookCreates = new Map<string, { arrived: () => void; released: Promise<void> }>();
  const publicKey: KeyObject | undefined = options.app ? createPublicKey(options.app.publicKey) : undefined;

  /** The example body of an operation's response, for a path and method of the description. */
  const example = (path: string, method: string, status: string): Schema => {
    const op = (doc["paths"] as Record<string, Record<string, Schema>>)[path]![method]!;
    const content = (op["responses"] as Record<string, Schema>)[status]!["content"] as Record<string, Schema>;
    const json = content["application/json"]!;
    const ex = Object.values(json["examples"] as Record<string, Schema>)[0]!;
    return clone(at(doc, ex["$ref"] as string)["value"] as Schema);
  };
  const schemaOf = (path: string, method: string, status: string): Schema => {
    const op = (doc["paths"] as Record<string, Record<string, Schema>>)[path]![method]!;
    let resp = (op["responses"] as Record<string, Schema>)[status];
    // GitHub answers some refusals its description does not list (a status on an unknown sha: 422).
    if (resp === undefined) return {};
    if (typeof resp["$ref"] === "string") resp = at(doc, resp["$ref"]);
    return ((resp["content"] as Record<string, Schema>)["application/json"]!["schema"] as Schema) ?? {};
  };

  function answer(res: ServerResponse, spec: [string, string, string] | null, status: number, body?: unknown) {
    if (spec && body !== undefined) {
      const problems = checkSchema(doc, schemaOf(...spec), body);
      if (problems.length > 0) {
        invalid.push(`${spec[1]} ${spec[0]} ${spec[2]}: ${problems.slice(0, 5).join("; ")}`);
        res
          .writeHead(500, { "content-type": "application/json" })
          .end('{"message":"stand-in answer off the description"}');
        return;
      }
    }
    if (body === undefined) res.writeHead(status).end();
    else res.writeHead(status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify(body));
  }
  const error = (res: ServerResponse, path: string, method: string, status: number, message: string) =>
    answer(res, [path, method, String(status)], status, { message, documentation_url: "https://docs.github.com/rest" });

  function verifyJwt(header: string | undefined): boolean {
    const m = /^bearer (.+)$/i.exec(header ?? "");
    if (!m || !options.app || !publicKey) return false;
    const [h, p, s] = m[1]!.split(".");
    if (!h || !p || !s) return false;
    const head = JSON.parse(Buffer.from(h, "base64url").toString()) as { alg?: string };
    const claims = JSON.parse(Buffer.from(p, "base64url").toString()) as { iss?: unknown; exp?: number; iat?: number };
    const now = Math.floor(Date.now() / 1000);
    return (
      head.alg === "RS256" &&
      verify("RSA-SHA256", Buffer.from(`${h}.${p}`), publicKey, Buffer.from(s, "base64url")) &&
      String(claims.iss) === options.app.appId &&
      typeof claims.exp === "number" &&
      claims.exp > now &&
      (claims.iat ?? 0) <= now + 60
    );
  }

  function authorized(req: IncomingMessage): boolean {
    const m = /^(?:token|bearer) (.+)$/i.exec(req.headers.authorization ?? "");
    if (!m) return false;
    return minted.has(m[1]!) || (options.token !== undefined && m[1] === options.token);
  }

  async function handle(req: IncomingMessage, res: ServerResponse, body: unknown) {
    const method = (req.method ?? "GET").toLowerCase();
    const url = new URL(req.url ?? "/", "http://x");
    if (!url.pathname.startsWith(`${prefix}/`)) return res.writeHead(404).end();
    const parts = url.pathname
      .slice(prefix.length + 1)
      .split("/")
      .map(decodeURIComponent);
    if (state.down) return res.writeHead(503, { "content-type": "text/plain" }).end("unavailable");

    if (method === "post" && parts[0] === "app" && parts[1] === "installations" && parts[3] === "access_tokens") {
      const p = "/app/installations/{installation_id}/access_tokens";
      if (!verifyJwt(req.headers.authorization))
        return error(res, p, method, 401, "A JSON web token could not be decoded");
      if (Number(parts[2]) !== options.app?.installationId) return error(res, p, method, 404, "Not Found");
      const token = `ghs_${String(state.nextId++).padStart(36, "0")}`;
      minted.add(token);
      const out = example(p, method, "201");
      Object.assign(out, { token, expires_at: new Date(Date.now() + 3_600_000).toISOString() });
      return answer(res, [p, method, "201"], 201, out);
    }
    if (parts[0] !== "repos" || parts.length < 3) return res.writeHead(404).end();
    if (!authorized(req))
      return answer(res, null, 401, { message: "Bad credentials", documentation_url: "https://docs.github.com/rest" });
    const name = `${parts[1]}/${parts[2]}`;
    const repo = repos.get(name);
    const rest = parts.slice(3);
    // Literal segments kept, values (ids, shas, branches) as ":".
    const literal = new Set(["branches", "commits", "compare", "statuses", "issues", "comments", "hooks"]);
    const route = `${method} ${rest.map((r) => (literal.has(r) ? r : ":")).join("/")}`
      .replace(/(branches\/:)(\/:)+$/, "$1")
      .trim();
    if (!repo) return error(res, "/repos/{owner}/{repo}", "get", 404, "Not Found");
    const [owner, repoName] = [parts[1]!, parts[2]!];
    switch (route) {
      case "get": {
        const p = "/repos/{owner}/{repo}";
        const out = example(p, method, "200");
        // The published example lacks `language`, which the schema requires.
        Object.assign(out, { name: repoName, full_name: name, language: "HCL" });
        if (out["source"]) (out["source"] as Schema)["language"] = "HCL";
        return answer(res, [p, method, "200"], 200, out);
      }
      case "get branches/:": {
        const p = "/repos/{owner}/{repo}/branches/{branch}";
        const branch = rest.slice(1).join("/");
        const sha = repo.branches[branch];
        if (!sha) return error(res, p, method, 404, "Branch not found");
        const out = example(p, method, "200");
        out["name"] = branch;
        (out["commit"] as Schema)["sha"] = sha;
        return answer(res, [p, method, "200"], 200, out);
      }
      case "get commits/:": {
        const p = "/repos/{owner}/{repo}/commits/{ref}";
        const c = repo.commits[rest[1]!];
        if (!c) return error(res, p, method, 422, `No commit found for SHA: ${rest[1]}`);
        const out = example(p, method, "200");
        out["sha"] = rest[1];
        const inner = out["commit"] as Schema;
        inner["message"] = c.message;
        inner["author"] = { ...c.author, date: "2026-01-01T00:00:00Z" };
        // The published example's file entries lack fields the schema requires; Drover reads none of them.
        out["files"] = [];
        return answer(res, [p, method, "200"], 200, out);
      }
      case "get compare/:": {
        const p = "/repos/{owner}/{repo}/compare/{basehead}";
        const files = repo.compare[rest[1]!];
        if (!files) return error(res, p, method, 404, "Not Found");
        const out = example(p, method, "200");
        const file = (out["files"] as Schema[])[0]!;
        out["files"] = files.map((f) => ({ ...clone(file), filename: f, status: "modified" }));
        return answer(res, [p, method, "200"], 200, out);
      }
      case "post statuses/:": {
        const p = "/repos/{owner}/{repo}/statuses/{sha}";
        const b = body as { state: string; context: string; description: string; target_url: string };
        if (!repo.commits[rest[1]!]) return error(res, p, method, 422, "No commit found for SHA");
        repo.statuses.push({
          sha: rest[1]!,
          state: b.state,
          context: b.context,
          description: b.description,
          targetUrl: b.target_url,
        });
        const out = example(p, method, "201");
        Object.assign(out, {
          state: b.state,
          context: b.context,
          description: b.description,
          target_url: b.target_url,
        });
        return answer(res, [p, method, "201"], 201, out);
      }
      case "get issues/:/comments": {
        const p = "/repos/{owner}/{repo}/issues/{issue_number}/comments";
        const [first] = example(p, method, "200") as unknown as Schema[];
        const all = [...repo.comments.entries()].filter(([, c]) => c.issue === Number(rest[1]));
        // Like GitHub: oldest first, `per_page` (30 by default, at most 100) a page, a Link to the next.
        const perPage = Math.min(100, Number(url.searchParams.get("per_page") ?? 30) || 30);
        const page = Math.max(1, Number(url.searchParams.get("page") ?? 1) || 1);
        if (page * perPage < all.length)
          res.setHeader(
            "link",
            `<http://${req.headers.host}${url.pathname}?per_page=${perPage}&page=${page + 1}>; rel="next"`,
          );
        const out = all
          .slice((page - 1) * perPage, page * perPage)
          .map(([id, c]) => ({ ...clone(first!), id, body: c.body }));
        return answer(res, [p, method, "200"], 200, out);
      }
      case "post issues/:/comments": {
        const p = "/repos/{owner}/{repo}/issues/{issue_number}/comments";
        const id = state.nextId++;
        repo.comments.set(id, { issue: Number(rest[1]), body: (body as { body: string }).body });
        // The comment is made, but its answer never reaches the client.
        if (state.loseCommentAnswers > 0) {
          state.loseCommentAnswers--;
          return void req.socket.destroy();
        }
        const out = example(p, method, "201");
        Object.assign(out, { id, body: (body as { body: string }).body });
        return answer(res, [p, method, "201"], 201, out);
      }
      case "patch issues/comments/:": {
        const p = "/repos/{owner}/{repo}/issues/comments/{comment_id}";
        const c = repo.comments.get(Number(rest[2]));
        if (!c) return answer(res, null, 404, { message: "Not Found" });
        c.body = (body as { body: string }).body;
        const out = example(p, method, "200");
        Object.assign(out, { id: Number(rest[2]), body: c.body });
        return answer(res, [p, method, "200"], 200, out);
      }
      case "post hooks": {
        const p = "/repos/{owner}/{repo}/hooks";
        if (state.forbidHooks) return error(res, p, method, 403, "Resource not accessible by personal access token");
        const held = heldHookCreates.get(`${owner}/${repoName}`);
        if (held) {
          held.arrived();
          await held.released;
        }
        const b = body as { events: string[]; config: { url: string; secret: string; content_type: string } };
        // GitHub keeps one hook per URL: a second is refused as a validation failure.
        if ([...repo.hooks.values()].some((h) => h.url === b.config.url))
          return answer(res, [p, method, "422"], 422, {
            message: "Validation Failed",
            errors: [{ resource: "Hook", code: "custom", message: "Hook already exists on this repository" }],
            documentation_url: "https://docs.github.com/rest/repos/webhooks#create-a-repository-webhook",
          });
        const id = state.nextId++;
        repo.hooks.set(id, {
          url: b.config.url,
          secret: b.config.secret,
          events: b.events,
          contentType: b.config.content_type,
        });
        const out = example(p, method, "201");
        Object.assign(out, {
          id,
          events: b.events,
          config: { url: b.config.url, content_type: "json", insecure_ssl: "0" },
        });
        return answer(res, [p, method, "201"], 201, out);
      }
      case "delete hooks/:": {
        if (!repo.hooks.delete(Number(rest[1])))
          return error(res, "/repos/{owner}/{repo}/hooks/{hook_id}", method, 404, "Not Found");
        return answer(res, null, 204);
      }
    }
    void owner;
    return res.writeHead(404).end();
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const body = text === "" ? undefined : (JSON.parse(text) as unknown);
      calls.push({ method: req.method ?? "", path: req.url ?? "", body, headers: { ...req.headers } });
      handle(req, res, body).catch((err: unknown) => res.writeHead(500).end(String(err)));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    apiUrl: `${url}${prefix}`,
    calls,
    invalid,
    repos,
    minted,
    state,
    addRepo(name: string, init: Partial<Pick<StandInRepo, "branches" | "commits" | "compare">> = {}): StandInRepo {
      const repo: StandInRepo = {
        branches: init.branches ?? {},
        commits: init.commits ?? {},
        compare: init.compare ?? {},
        statuses: [],
        comments: new Map(),
        hooks: new Map(),
      };
      repos.set(name, repo);
      return repo;
    },
    /** Holds the creation of `repository`'s webhooks until `release()`; `arrived` settles when one waits. */
    holdHookCreates(repository: string): { arrived: Promise<void>; release(): void } {
      let arrived!: () => void;
      let release!: () => void;
      const arrival = new Promise<void>((resolve) => (arrived = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      heldHookCreates.set(repository, { arrived, released });
      return {
        arrived: arrival,
        release: () => {
          heldHookCreates.delete(repository);
          release();
        },
      };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
export type GithubApi = Awaited<ReturnType<typeof startGithubApi>>;
