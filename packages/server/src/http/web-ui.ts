import type { FastifyInstance, FastifyReply } from "fastify";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { gzipSync } from "node:zlib";

/*
 * The web UI: the built files of @drover/web, served from memory. Every /app/* path answers the
 * single page (the browser's router takes it from there); files under /assets/ carry a content
 * hash in their names, so they are cached for a year, while the page itself is revalidated on
 * every load so a new release takes effect at once.
 */

/** Paths the UI owns beside the API (the route table's contract does not cover them). */
export const webUiPaths = ["/", "/app", "/app/*", "/assets/*"] as const;

/**
 * The page may load scripts, styles, images and data from this origin only: no inline script,
 * no eval, no framing. Styles set through the DOM's style properties stay allowed (not inline CSS).
 */
export const contentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

const securityHeaders = {
  "content-security-policy": contentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "cross-origin-opener-policy": "same-origin",
  "x-frame-options": "DENY",
};

const contentTypes: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2",
};

interface StaticFile {
  body: Buffer;
  gzipped: Buffer | null;
  type: string;
  cacheControl: string;
}

/** The built UI's directory: `dist` of the @drover/web package, or null when it is not installed. */
export function webUiDirectory(): string | null {
  try {
    const pkg = createRequire(import.meta.url).resolve("@drover/web/package.json");
    return path.join(path.dirname(pkg), "dist");
  } catch {
    return null;
  }
}

function loadFiles(dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  const walk = (sub: string) => {
    for (const name of readdirSync(path.join(dir, sub))) {
      const rel = path.posix.join(sub, name);
      const full = path.join(dir, rel);
      if (statSync(full).isDirectory()) {
        walk(rel);
        continue;
      }
      const body = readFileSync(full);
      const ext = path.extname(name);
      const compressible = [".html", ".js", ".css", ".svg", ".json", ".txt"].includes(ext);
      files.set(`/${rel}`, {
        body,
        gzipped: compressible && body.length > 1024 ? gzipSync(body) : null,
        type: contentTypes[ext] ?? "application/octet-stream",
        cacheControl: rel.startsWith("assets/") ? "public, max-age=31536000, immutable" : "no-cache",
      });
    }
  };
  walk("");
  return files;
}

function sendFile(reply: FastifyReply, file: StaticFile, acceptEncoding: string | undefined): FastifyReply {
  void reply.headers(securityHeaders).header("content-type", file.type).header("cache-control", file.cacheControl);
  void reply.header("vary", "accept-encoding");
  if (file.gzipped && /\bgzip\b/.test(acceptEncoding ?? "")) {
    return reply.header("content-encoding", "gzip").send(file.gzipped);
  }
  return reply.send(file.body);
}

/**
 * Serves the UI at /app (and / redirects there). Without a build, /app explains how to make one
 * instead of failing the server: the API works without the UI.
 */
export function registerWebUi(app: FastifyInstance, dir: string | null = webUiDirectory()): void {
  const files = dir !== null && existsSync(path.join(dir, "index.html")) ? loadFiles(dir) : null;
  const page = files?.get("/index.html") ?? null;

  app.get("/", async (_req, reply) => reply.redirect("/app/", 302));
  const servePage = async (req: { headers: { "accept-encoding"?: string } }, reply: FastifyReply) => {
    if (!page) {
      return reply
        .code(503)
        .headers(securityHeaders)
        .type("text/plain; charset=utf-8")
        .send("The web UI is not built in this installation: run `npm run build` in the Drover checkout.\n");
    }
    return sendFile(reply, page, req.headers["accept-encoding"]);
  };
  app.get("/app", servePage);
  app.get("/app/*", servePage);
  app.get("/assets/*", async (req, reply) => {
    const file = files?.get(req.url.split("?")[0] ?? "");
    if (!file) return reply.code(404).send({ error: "not_found", message: `no file ${req.url.split("?")[0]}` });
    return sendFile(reply, file, req.headers["accept-encoding"]);
  });
}
