import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import { Writable } from "node:stream";
import { join } from "node:path";
import { DroverError } from "@drover/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { storageError } from "../db/storage-errors.js";
import type { BodyFile } from "../store/bodies.js";

/*
 * Large request bodies go to a file in the server's upload directory as they arrive, never
 * into memory (decision 0012): the route's bodyLimit is enforced while reading (413 as soon
 * as it is passed, the rest unread), a full disk is 507 storage_full, and the file is removed
 * when the request ends, whatever its outcome. The store then reads the file in chunks.
 */

/** Where a server keeps bodies in flight: `<data dir>/uploads`. */
export function uploadDirOf(dataDir: string): string {
  return join(dataDir, "uploads");
}

/**
 * Creates the upload directory (owner only: bodies hold state and plans) and empties it: files
 * left there belong to requests of a server process that died mid-upload.
 */
export async function prepareUploadDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  for (const name of await readdir(dir)) await rm(join(dir, name), { force: true, recursive: true });
}

const spooled = new WeakMap<FastifyRequest, string>();
/** Bodies refused mid-stream as too large: their rest is read and dropped, not left unread. */
const refusedMidBody = new WeakSet<IncomingMessage>();

/**
 * Makes every route of `scope` receive bodies of `contentTypes` as a spooled BodyFile, each
 * route up to its own `bodyLimit` (set it on the route: the server default is 1 MiB).
 */
export function spoolBodies(scope: FastifyInstance, contentTypes: string | string[], uploadDir: string): void {
  scope.addHook("onRequest", async (request, reply) => {
    const path = join(uploadDir, `${randomUUID()}.body`);
    spooled.set(request, path);
    // After the response, or when the client goes away: either way the body is no longer needed.
    reply.raw.once("close", () => void rm(path, { force: true }));
  });
  keepRefusedConnectionsOpen(scope);
  scope.addContentTypeParser(contentTypes, async (request: FastifyRequest, payload: IncomingMessage) => {
    const path = spooled.get(request);
    if (path === undefined) throw new Error(`no upload file was assigned to ${request.method} ${request.url}`);
    return spool(payload, path, request.routeOptions.bodyLimit, uploadDir, Number(request.headers["content-length"]));
  });
}

/**
 * Fastify answers a failed body with `connection: close`. For a body refused mid-stream that
 * close would race the client's bytes still in flight; the connection instead stays open while
 * the rest is dropped until the client closes it (or stalls past the server's idle timeout).
 */
function keepRefusedConnectionsOpen(scope: FastifyInstance): void {
  scope.addHook("onSend", async (request, reply) => {
    if (refusedMidBody.has(request.raw)) void reply.removeHeader("connection");
  });
}

/** The body of a spooled route; an absent body (no content type) is an empty one. */
export function spooledBody(request: FastifyRequest): BodyFile {
  const body = request.body;
  if (isBodyFile(body)) return body;
  if (body === undefined || body === null) return { path: "/dev/null", size: 0 };
  throw new DroverError("bad_request", "expected a raw request body");
}

/** Whether a request's body is a spooled file. */
export function isBodyFile(value: unknown): value is BodyFile {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as BodyFile).path === "string" &&
    typeof (value as BodyFile).size === "number"
  );
}

function tooLarge(limit: number, seen: number | undefined): DroverError {
  const size = seen === undefined ? "" : ` (${seen} bytes or more)`;
  return new DroverError(
    "payload_too_large",
    `the request body is larger than this endpoint accepts${size}: the limit is ${limit} bytes`,
  );
}

/**
 * Makes every route of `scope` read bodies of `contentTypes` to their end and drop them, each up to
 * its route's `bodyLimit`: for an upload the client must make but whose content is not kept. The
 * handler sees it as an empty BodyFile of the size received.
 */
export function dropBodies(scope: FastifyInstance, contentTypes: string | string[]): void {
  keepRefusedConnectionsOpen(scope);
  scope.addContentTypeParser(contentTypes, async (request: FastifyRequest, payload: IncomingMessage) => {
    const sink = new Writable({ write: (_piece, _encoding, done) => done() });
    const size = await receive(
      payload,
      sink,
      request.routeOptions.bodyLimit,
      Number(request.headers["content-length"]),
    );
    return { path: "/dev/null", size } satisfies BodyFile;
  });
}

/** Copies the request body to `path`; a failed or refused body leaves no file. */
async function spool(
  payload: IncomingMessage,
  path: string,
  limit: number,
  uploadDir: string,
  declared: number,
): Promise<BodyFile> {
  // A declared length over the limit is refused before a byte is read (or a file is made).
  if (declared > limit) throw tooLarge(limit, declared);
  try {
    const size = await receive(payload, createWriteStream(path, { flags: "wx", mode: 0o600 }), limit, declared);
    return { path, size };
  } catch (err) {
    await rm(path, { force: true });
    const full = err instanceof DroverError ? undefined : storageError(err, uploadDir);
    throw full?.code === "storage_full" ? full : err;
  }
}

/**
 * Writes the request body to `sink` and gives its size. An over-limit body is answered 413 at
 * once, while its rest is read and dropped so that the answer reaches the client.
 */
function receive(payload: IncomingMessage, sink: Writable, limit: number, declared: number): Promise<number> {
  if (declared > limit) return Promise.reject(tooLarge(limit, declared));
  return new Promise((resolve, reject) => {
    let size = 0;
    let settled = false;
    /** `ofSink`: the sink's own failure (a full disk), told as itself, not as the client's. */
    const fail = (err: unknown, ofSink = false) => {
      if (settled) return;
      settled = true;
      payload.off("data", onData);
      if (err instanceof DroverError && err.code === "payload_too_large") {
        // Read the rest and drop it: closing a socket with unread bytes in it sends a reset,
        // which can reach the client before the 413 does (it then sees EPIPE, not the answer).
        refusedMidBody.add(payload);
        payload.resume();
      } else {
        payload.pause();
      }
      sink.destroy();
      const coded =
        err instanceof DroverError || ofSink || payload.complete
          ? err
          : new DroverError(
              "bad_request",
              "the request body ended before it was complete: the client closed the connection; retry the upload",
              { cause: err },
            );
      reject(coded instanceof Error ? coded : new Error(String(coded)));
    };
    const onData = (piece: Buffer) => {
      size += piece.length;
      if (size > limit) return fail(tooLarge(limit, size));
      if (!sink.write(piece)) payload.pause();
    };
    sink.on("drain", () => {
      if (!settled) payload.resume();
    });
    sink.on("error", (err) => fail(err, true));
    payload.on("data", onData);
    payload.on("error", fail);
    payload.on("close", () => {
      if (!payload.complete) fail(new Error("connection closed mid-body"));
    });
    payload.on("end", () => {
      if (settled) return;
      sink.end(() => {
        if (settled) return;
        settled = true;
        resolve(size);
      });
    });
  });
}
