/** Serves the group/version/plural of every CustomResourceDefinition, from create to delete. */
import type { ObjectApi } from "./object-api.js";
import { compareVersions, typeKey } from "./resources.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

export function serveCustomResources(api: ObjectApi): void {
  api.onWrite((t, crd, removed) => {
    if (t.group !== "apiextensions.k8s.io" || t.resource !== "customresourcedefinitions") return;
    const spec = isObject(crd.spec) ? crd.spec : {};
    const group = String(spec.group ?? "");
    const names = isObject(spec.names) ? spec.names : {};
    const plural = String(names.plural ?? "");
    if (removed || crd.metadata.deletionTimestamp) {
      for (const o of api.store.list(typeKey(group, plural)))
        api.store.remove(typeKey(group, plural), o.metadata.namespace, o.metadata.name ?? "");
      api.resources.unregister(group, plural);
      return;
    }
    register(api, crd);
  });
}

function register(api: ObjectApi, crd: KObject): void {
  const spec = isObject(crd.spec) ? crd.spec : {};
  const names = isObject(spec.names) ? spec.names : {};
  const versions = (Array.isArray(spec.versions) ? spec.versions : [])
    .filter(isObject)
    .filter((v) => v.served !== false);
  const schemas = new Map<string, JsonObject | undefined>();
  const printerColumns = new Map<string, JsonObject[]>();
  let status = false;
  for (const v of versions) {
    const name = String(v.name);
    const schema = isObject(v.schema) && isObject(v.schema.openAPIV3Schema) ? v.schema.openAPIV3Schema : undefined;
    schemas.set(name, schema);
    printerColumns.set(
      name,
      (Array.isArray(v.additionalPrinterColumns) ? v.additionalPrinterColumns : []).filter(isObject),
    );
    if (isObject(v.subresources) && v.subresources.status !== undefined) status = true;
  }
  const kind = String(names.kind ?? "");
  api.resources.register({
    group: String(spec.group ?? ""),
    versions: versions.map((v) => String(v.name)).sort(compareVersions),
    resource: String(names.plural ?? ""),
    singular: String(names.singular ?? kind.toLowerCase()),
    kind,
    listKind: String(names.listKind ?? `${kind}List`),
    namespaced: spec.scope === "Namespaced",
    shortNames: Array.isArray(names.shortNames) ? names.shortNames.map(String) : [],
    categories: Array.isArray(names.categories) ? names.categories.map(String) : [],
    statusSubresource: status,
    custom: { schemas, printerColumns },
  });
}
