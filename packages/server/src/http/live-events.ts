import { liveEvents } from "@drover/protocol";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { HttpContext } from "./context.js";
import { requireUser } from "./auth.js";

/*
 * The live stream of a browser tab: the server's own wake-up events, relayed as server-sent
 * events. An event names what changed and nothing more (the page re-reads it through the API,
 * where its rights are checked), so a dropped or repeated event costs a re-read, never a wrong page.
 */

/** How often a comment line keeps proxies from cutting the idle stream, and the session is re-checked. */
export const liveKeepAliveMs = 25_000;
/** A tab that stopped reading is cut off past this many unsent bytes; it reconnects and re-reads. */
const maxBufferedBytes = 256 * 1024;

/** Streams events to the caller until it goes away, its session ends or the server stops. */
export function streamLiveEvents(
  ctx: HttpContext,
  req: FastifyRequest,
  reply: FastifyReply,
  keepAliveMs = liveKeepAliveMs,
): void {
  void reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-store",
    // nginx buffers responses unless told not to; a buffered stream is no stream.
    "x-accel-buffering": "no",
  });
  const stops: (() => void)[] = [];
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    for (const stop of stops) stop();
    res.end();
  };
  const write = (text: string) => {
    if (ended) return;
    if (res.writableLength > maxBufferedBytes) return end();
    res.write(text);
  };
  const send = (event: string, data: string) => write(`event: ${event}\ndata: ${data}\n\n`);

  // After a lost connection the browser reconnects by itself; the page then re-reads (resync).
  write("retry: 2000\n\n");
  stops.push(
    ctx.store.events.subscribeTopic("run-changed", (id) => send(liveEvents.run, id)),
    ctx.store.events.subscribeTopic("log", (jobId) => send(liveEvents.log, jobId)),
    ctx.store.events.subscribeTopic("sessions-changed", (key) => send(liveEvents.agents, key)),
    ctx.store.events.onWakeAll(() => send(liveEvents.resync, "")),
  );
  const keepAlive = setInterval(() => {
    write(": keep-alive\n\n");
    // A signed-out or revoked session stops receiving even the ids of what changes.
    requireUser(ctx.store, req).catch(end);
  }, keepAliveMs);
  keepAlive.unref();
  stops.push(() => clearInterval(keepAlive));
  const onShutdown = () => end();
  ctx.shutdown.addEventListener("abort", onShutdown, { once: true });
  stops.push(() => ctx.shutdown.removeEventListener("abort", onShutdown));
  req.raw.once("close", end);
  res.once("close", end);
}
