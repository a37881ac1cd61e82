import { DroverError, isErrorCode } from "@drover/protocol";
import { EnvHttpProxyAgent, request, type Dispatcher } from "undici";
import type { z } from "zod";
import type { Settings } from "./settings.js";

const dispatcher = new EnvHttpProxyAgent({ headersTimeout: 0, bodyTimeout: 0 });

/** A raw response of the user API. */
export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** The user API client: Bearer token, schema-checked JSON, `{error, message}` → DroverError. */
export class ApiClient {
  constructor(readonly settings: Settings) {}

  async raw(method: Dispatcher.HttpMethod, path: string, options: { json?: unknown; body?: Buffer; contentType?: string; signal?: AbortSignal } = {}): Promise<RawResponse> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.settings.token}` };
    let body: string | Buffer | undefined;
    if (options.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.json);
    } else if (options.body) {
      headers["content-type"] = options.contentType ?? "application/octet-stream";
      body = options.body;
    }
    let res: Dispatcher.ResponseData;
    try {
      res = await request(this.settings.url + path, { method, headers, body, dispatcher, signal: options.signal });
    } catch (err) {
      throw new DroverError("internal", `cannot reach the Drover server at ${this.settings.url}: ${err instanceof Error ? err.message : String(err)}`);
    }
    const data = Buffer.from(await res.body.arrayBuffer());
    if (res.statusCode >= 400) {
      let parsed: { error?: unknown; message?: unknown } = {};
      try {
        parsed = JSON.parse(data.toString("utf8")) as typeof parsed;
      } catch {
        // not JSON
      }
      const message = typeof parsed.message === "string" ? parsed.message : `HTTP ${res.statusCode} from ${method} ${path}`;
      throw new DroverError(isErrorCode(parsed.error) ? parsed.error : res.statusCode >= 500 ? "internal" : "bad_request", message);
    }
    return { status: res.statusCode, headers: res.headers, body: data };
  }

  async json<S extends z.ZodType>(schema: S, method: Dispatcher.HttpMethod, path: string, options: { json?: unknown; body?: Buffer; contentType?: string } = {}): Promise<z.infer<S>> {
    const res = await this.raw(method, path, options);
    const parsed = schema.safeParse(JSON.parse(res.body.toString("utf8")));
    if (!parsed.success) throw new Error(`unexpected response from ${method} ${path}: ${parsed.error.message}`);
    return parsed.data;
  }
}
