import { request } from "node:http";

/**
 * The status a server answers to a request that has sent only its headers, announcing
 * `announcedBytes` of body: a refusal that comes before the body proves the body was never read.
 * No answer within `timeoutMs` rejects (the server waits for the body).
 */
export function statusBeforeBody(
  url: string,
  method: string,
  headers: Record<string, string>,
  announcedBytes: number,
  timeoutMs = 20_000,
): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const req = request(url, {
      method,
      headers: { "content-type": "application/octet-stream", ...headers, "content-length": String(announcedBytes) },
    });
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
      req.destroy();
    });
    req.on("error", reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error("no answer before the body was sent")));
    req.flushHeaders();
  });
}
