import { request as undiciRequest, type Dispatcher } from "undici";

/** undici's EnvHttpProxyAgent: honours HTTP(S)_PROXY and NO_PROXY. */
export { EnvHttpProxyAgent } from "undici";

/**
 * Options of `request`: undici's, with the dispatcher required, so that no call goes through
 * undici's global dispatcher (which ignores the caller's CA, proxy and deadlines).
 */
export type TransportRequestOptions = Omit<Dispatcher.RequestOptions, "origin" | "path" | "method"> & {
  method?: Dispatcher.HttpMethod;
  dispatcher: Dispatcher;
};

/** undici's `request(url, options)` on `options.dispatcher`: GET unless a method is given. */
export function request(url: string | URL, options: TransportRequestOptions): Promise<Dispatcher.ResponseData> {
  return undiciRequest(url, options);
}
