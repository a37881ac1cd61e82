/**
 * Minimal OpenAPI v3 discovery: one document per group/version listing each kind's
 * PATCH operation (with `x-kubernetes-group-version-kind` and the `fieldValidation`
 * parameter). That is what kubectl checks before it leaves validation to the server
 * (`--validate=strict`); schemas are not published, so kubectl computes apply patches
 * from its built-in types (strategic merge) or, for custom resources, as merge patches.
 */
import { createHash } from "node:crypto";
import type { ResourceRegistry } from "./resources.js";
import { apiVersionOf } from "./resources.js";
import type { JsonObject } from "./types.js";

function gvPath(group: string, version: string): string {
  return group === "" ? `api/${version}` : `apis/${group}/${version}`;
}

const patchParams = ["dryRun", "fieldManager", "fieldValidation", "force", "pretty"].map((name) => ({
  name,
  in: "query",
  schema: { type: name === "force" ? "boolean" : "string" },
  uniqueItems: true,
}));

export function openApiDocument(registry: ResourceRegistry, group: string, version: string): JsonObject | undefined {
  const paths: JsonObject = {};
  for (const t of registry.all()) {
    if (t.group !== group || !t.versions.includes(version)) continue;
    const prefix = `/${gvPath(group, version)}${t.namespaced ? "/namespaces/{namespace}" : ""}/${t.resource}/{name}`;
    const gvk = { group, version, kind: t.kind };
    paths[prefix] = {
      patch: {
        operationId: `patch${t.kind}`,
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk,
        parameters: patchParams,
        requestBody: {
          content: {
            "application/json-patch+json": { schema: { type: "object" } },
            "application/merge-patch+json": { schema: { type: "object" } },
            "application/apply-patch+yaml": { schema: { type: "object" } },
          },
          required: true,
        },
        responses: { "200": { description: "OK" } },
      },
    };
  }
  if (Object.keys(paths).length === 0) return undefined;
  return {
    openapi: "3.0.0",
    info: { title: "Kubernetes", version: apiVersionOf(group, version) },
    paths,
    components: { schemas: {} },
  };
}

export function openApiRoot(registry: ResourceRegistry): JsonObject {
  const paths: JsonObject = {};
  const seen = new Set<string>();
  for (const t of registry.all()) {
    for (const v of t.versions) {
      const p = gvPath(t.group, v);
      if (seen.has(p)) continue;
      seen.add(p);
      const doc = openApiDocument(registry, t.group, v);
      const hash = createHash("sha512").update(JSON.stringify(doc)).digest("hex").toUpperCase().slice(0, 128);
      paths[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=${hash}` };
    }
  }
  return { paths };
}
