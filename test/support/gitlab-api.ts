import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import { checkSchema, type Schema } from "./json-schema-check.js";
import type { RecordedCall, StandInCommit } from "./github-api.js";

/*
 * A GitLab REST API (v4) stand-in on 127.0.0.1 for the operations Drover uses. Every call is
 * recorded; every answer is checked, before it leaves, against the definitions of GitLab's
 * published description kept in test/fixtures/vcs/gitlab-openapi-subset.json (an answer outside
 * them is a 500, listed in `invalid`). Like GitLab: a bad PRIVATE-TOKEN is 401, an unknown
 * project or branch a 404 saying which, a status set twice to the same state a 400.
 */

export interface GitlabProject {
  id: number;
  branches: Record<string, string>;
  commits: Record<string, StandInCommit>;
  /** `from...to` → the changed paths. */
  compare: Record<string, string[]>;
  statuses: { sha: string; state: string; name: string; description: string; targetUrl: string }[];
  notes: Map<number, { mr: number; body: string }>;
  hooks: Map<number, { url: string; token: string; pushEvents: boolean; mergeRequestsEvents: boolean }>;
}

const fixture = fileURLToPath(new URL("../../fixtures/vcs/gitlab-openapi-subset.json", import.meta.url));

export async function startGitlabApi(options: { token: string }) {
  const doc = JSON.parse(readFileSync(fixture, "utf8")) as Schema;
  const calls: RecordedCall[] = [];
  const invalid: string[] = [];
  const projects = new Map<string, GitlabProject>();
  /** Faults: the API answers 503; this many note creations lose their answer. */
  const state = { down: false, loseNoteAnswers: 0, nextId: 500 };
  const time = "2026-01-01T00:00:00.000Z";

  function answer(res: ServerResponse, status: number, body?: unknown, definition?: string): void {
    if (definition !== undefined) {
      // `Name[]`: a list of the definition `Name`.
      const ref = { $ref: `#/definitions/${definition.replace(/\[\]$/, "")}` };
      const schema = definition.endsWith("[]") ? { type: "array", items: ref } : ref;
      const problems = checkSchema(doc, schema, body);
      if (problems.length > 0) {
        invalid.push(`${definition}: ${problems.slice(0, 5).join("; ")}`);
        res.writeHead(500, { "content-type": "application/json" }).end('{"message":"500 stand-in"}');
        return;
      }
    }
    if (body === undefined) {
      res.writeHead(status).end();
      return;
    }
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  }
  const notFound = (res: ServerResponse, what: string) => answer(res, 404, { message: `404 ${what} Not Found` });

  const commitEntity = (sha: string, c: StandInCommit) => ({
    id: sha,
    short_id: sha.slice(0, 8),
    created_at: time,
    parent_ids: [],
    title: c.message.split("\n")[0],
    message: c.message,
    author_name: c.author.name,
    author_email: c.author.email,
    authored_date: time,
    committer_name: c.author.name,
    committer_email: c.author.email,
    committed_date: time,
    trailers: {},
    extended_trailers: {},
    web_url: `http://gitlab.example/-/commit/${sha}`,
  });

  function handle(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown> | undefined): void {
    const url = new URL(req.url ?? "/", "http://x");
    if (state.down) return void res.writeHead(503, { "content-type": "text/plain" }).end("unavailable");
    if (req.headers["private-token"] !== options.token) return answer(res, 401, { message: "401 Unauthorized" });
    // Split before decoding: a project path is one encoded segment.
    const parts = url.pathname.split("/").slice(1).map(decodeURIComponent);
    if (parts[0] !== "api" || parts[1] !== "v4" || parts[2] !== "projects" || parts[3] === undefined)
      return notFound(res, "");
    const project = projects.get(parts[3]);
    if (!project) return notFound(res, "Project");
    const rest = parts.slice(4).join("/");
    const m = (re: RegExp) => re.exec(`${req.method} ${rest}`);
    let r: RegExpExecArray | null;
    if ((r = m(/^GET repository\/branches\/(.+)$/))) {
      const sha = project.branches[r[1]!];
      if (!sha) return notFound(res, "Branch");
      const c = project.commits[sha] ?? { message: "", author: { name: "", email: "" } };
      const out = {
        name: r[1],
        commit: commitEntity(sha, c),
        merged: false,
        protected: false,
        developers_can_push: false,
        developers_can_merge: false,
        can_push: true,
        default: false,
        web_url: `http://gitlab.example/-/tree/${r[1]}`,
      };
      return answer(res, 200, out, "API_Entities_Branch");
    }
    if ((r = m(/^GET repository\/commits\/([0-9a-f]+)$/))) {
      const c = project.commits[r[1]!];
      if (!c) return notFound(res, "Commit");
      const out = {
        ...commitEntity(r[1]!, c),
        stats: { additions: 1, deletions: 0, total: 1 },
        project_id: project.id,
      };
      return answer(res, 200, out, "API_Entities_CommitDetail");
    }
    if ((r = m(/^GET repository\/compare$/))) {
      // `straight=true` compares the two commits directly (from..to); the default, from their merge base (from...to).
      const dots = url.searchParams.get("straight") === "true" ? ".." : "...";
      const files = project.compare[`${url.searchParams.get("from")}${dots}${url.searchParams.get("to")}`];
      if (!files) return notFound(res, "Ref");
      const to = url.searchParams.get("to") ?? "";
      const out = {
        commit: commitEntity(to, project.commits[to] ?? { message: "", author: { name: "", email: "" } }),
        commits: [],
        diffs: files.map((f) => ({
          diff: "",
          collapsed: false,
          too_large: false,
          new_path: f,
          old_path: f,
          a_mode: "100644",
          b_mode: "100644",
          new_file: false,
          renamed_file: false,
          deleted_file: false,
          generated_file: false,
        })),
        compare_timeout: false,
        compare_same_ref: false,
        web_url: "http://gitlab.example/-/compare",
      };
      return answer(res, 200, out, "API_Entities_Compare_Documented");
    }
    if ((r = m(/^POST statuses\/([0-9a-f]+)$/))) {
      const b = body as { state: string; name?: string; description?: string; target_url?: string };
      if (!project.commits[r[1]!]) return notFound(res, "Commit");
      const name = b.name ?? "default";
      const last = project.statuses.filter((s) => s.sha === r![1] && s.name === name).pop();
      if (last?.state === b.state)
        return answer(res, 400, {
          message: `Cannot transition status via :${b.state} from :${b.state} to :${b.state}`,
        });
      project.statuses.push({
        sha: r[1]!,
        state: b.state,
        name,
        description: b.description ?? "",
        targetUrl: b.target_url ?? "",
      });
      const out = {
        id: state.nextId++,
        sha: r[1],
        ref: "",
        status: b.state,
        name,
        target_url: b.target_url ?? "",
        description: b.description ?? "",
        created_at: time,
        allow_failure: false,
        pipeline_id: 1,
      };
      return answer(res, 201, out, "API_Entities_CommitStatus");
    }
    const note = (id: number, mr: number, text: string) => ({
      id,
      body: text,
      attachment: null,
      author: { id: 1, username: "drover-bot" },
      created_at: time,
      updated_at: time,
      system: false,
      noteable_id: 1000 + mr,
      noteable_type: "MergeRequest",
      noteable_iid: mr,
      resolvable: false,
      confidential: false,
      internal: false,
    });
    if ((r = m(/^GET merge_requests\/([0-9]+)\/notes$/))) {
      const mr = Number(r[1]);
      const all = [...project.notes.entries()].filter(([, n]) => n.mr === mr);
      if (url.searchParams.get("sort") !== "asc") all.reverse(); // GitLab's default: newest first
      // Like GitLab: `per_page` (20 by default, at most 100) a page, the next page in Link and X-Next-Page.
      const perPage = Math.min(100, Number(url.searchParams.get("per_page") ?? 20) || 20);
      const page = Math.max(1, Number(url.searchParams.get("page") ?? 1) || 1);
      const more = page * perPage < all.length;
      const next = new URL(url.href.replace(/^http:\/\/x/, `http://${req.headers.host}`));
      next.searchParams.set("page", String(page + 1));
      res.setHeader("x-next-page", more ? String(page + 1) : "");
      if (more) res.setHeader("link", `<${next.href}>; rel="next"`);
      const out = all.slice((page - 1) * perPage, page * perPage).map(([id, n]) => note(id, mr, n.body));
      return answer(res, 200, out, "API_Entities_Note_Documented[]");
    }
    if ((r = m(/^POST merge_requests\/([0-9]+)\/notes$/))) {
      const id = state.nextId++;
      const text = String(body?.["body"] ?? "");
      project.notes.set(id, { mr: Number(r[1]), body: text });
      // The note is made, but its answer never reaches the client.
      if (state.loseNoteAnswers > 0) {
        state.loseNoteAnswers--;
        return void req.socket.destroy();
      }
      return answer(res, 201, note(id, Number(r[1]), text), "API_Entities_Note_Documented");
    }
    if ((r = m(/^PUT merge_requests\/([0-9]+)\/notes\/([0-9]+)$/))) {
      const n = project.notes.get(Number(r[2]));
      if (!n || n.mr !== Number(r[1])) return notFound(res, "Note");
      n.body = String(body?.["body"] ?? "");
      return answer(res, 200, note(Number(r[2]), n.mr, n.body), "API_Entities_Note_Documented");
    }
    if ((r = m(/^POST hooks$/))) {
      const b = body as {
        url: string;
        token?: string;
        push_events?: boolean;
        merge_requests_events?: boolean;
        enable_ssl_verification?: boolean;
      };
      const id = state.nextId++;
      project.hooks.set(id, {
        url: b.url,
        token: b.token ?? "",
        pushEvents: b.push_events === true,
        mergeRequestsEvents: b.merge_requests_events === true,
      });
      const out = {
        id,
        url: b.url,
        name: null,
        project_id: project.id,
        push_events: b.push_events === true,
        push_events_branch_filter: null,
        issues_events: false,
        merge_requests_events: b.merge_requests_events === true,
        tag_push_events: false,
        note_events: false,
        pipeline_events: false,
        enable_ssl_verification: b.enable_ssl_verification !== false,
        created_at: time,
      };
      return answer(res, 201, out, "API_Entities_ProjectHook_Documented");
    }
    if ((r = m(/^DELETE hooks\/([0-9]+)$/))) {
      if (!project.hooks.delete(Number(r[1]))) return notFound(res, "Hook");
      return answer(res, 204);
    }
    return notFound(res, "");
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const body = text === "" ? undefined : (JSON.parse(text) as Record<string, unknown>);
      calls.push({ method: req.method ?? "", path: req.url ?? "", body, headers: { ...req.headers } });
      try {
        handle(req, res, body);
      } catch (err) {
        res.writeHead(500).end(String(err));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    apiUrl: `${url}/api/v4`,
    calls,
    invalid,
    projects,
    state,
    addProject(
      path: string,
      init: Partial<Pick<GitlabProject, "branches" | "commits" | "compare">> = {},
    ): GitlabProject {
      const p: GitlabProject = {
        id: projects.size + 1,
        branches: init.branches ?? {},
        commits: init.commits ?? {},
        compare: init.compare ?? {},
        statuses: [],
        notes: new Map(),
        hooks: new Map(),
      };
      projects.set(path, p);
      return p;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
export type GitlabApi = Awaited<ReturnType<typeof startGitlabApi>>;
