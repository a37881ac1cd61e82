import { settings } from "@drover/protocol";
import { createConfiguration, ServerConfiguration, type Configuration, type KubeConfig } from "@kubernetes/client-node";
import { describingErrors } from "./api-errors.js";

/** Deadline of one Kubernetes API call where no setting says otherwise. */
export const defaultApiTimeoutMs = settings.DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS.default * 1000;

/**
 * Like `KubeConfig.makeApiClient`, but every call gets a deadline: an API server that accepts
 * the connection and never answers fails the call after `timeoutMs` (the caller's retry or
 * error path takes over) instead of stalling the loop that made it. Watches are not made here.
 * Failed calls reject with a KubeApiError naming the object acted on and the API's reason.
 */
export function apiClientWithDeadline<T extends object>(
  kc: KubeConfig,
  type: new (config: Configuration) => T,
  timeoutMs: number,
): T {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("the kubeconfig has no current cluster");
  return describingErrors(
    new type(
      createConfiguration({
        baseServer: new ServerConfiguration(cluster.server, {}),
        authMethods: { default: kc },
        promiseMiddleware: [
          {
            // AbortSignal.timeout's timer is unref'd and needs no cleanup; it also bounds reading the body.
            pre: (context) => {
              context.setSignal(AbortSignal.timeout(timeoutMs));
              return Promise.resolve(context);
            },
            post: (response) => Promise.resolve(response),
          },
        ],
      }),
    ),
  );
}
