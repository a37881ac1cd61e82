/**
 * OpenShift's `restricted-v2` SecurityContextConstraints, the part that concerns users: a
 * namespace annotated `openshift.io/sa.scc.uid-range: <first>/<size>` (OpenShift's project
 * controller sets it on every project; here it is the opt-in) admits a pod only if every
 * container's effective runAsUser is in that range and the pod's fsGroup is in the
 * `openshift.io/sa.scc.supplemental-groups` range (the uid range when unset). A container with
 * no runAsUser gets the range's first UID, a pod with no fsGroup that first group: the
 * "arbitrary UID" a real project gives. Refusals carry OpenShift's message. Only the UID and
 * fsGroup strategies are modelled (capabilities, seccomp and volume types are PodSecurity's).
 */
import type { AdmissionPlugin, ObjectApi } from "./object-api.js";
import { StatusError } from "./status-error.js";
import type { JsonObject } from "./types.js";
import { isObject } from "./types.js";

export const sccUidRangeAnnotation = "openshift.io/sa.scc.uid-range";
export const sccGroupsAnnotation = "openshift.io/sa.scc.supplemental-groups";

const arr = (v: unknown): JsonObject[] => (Array.isArray(v) ? v.filter(isObject) : []);

/** `1000680000/10000` (or a comma-separated list of such blocks) → inclusive ranges. */
function ranges(annotation: string): [number, number][] {
  return annotation.split(",").flatMap((block) => {
    const m = /^\s*(\d+)\/(\d+)\s*$/.exec(block);
    return m ? [[Number(m[1]), Number(m[1]) + Number(m[2]) - 1] as [number, number]] : [];
  });
}
const within = (rs: [number, number][], n: number) => rs.some(([lo, hi]) => n >= lo && n <= hi);
const shown = (rs: [number, number][]) => rs.map(([lo, hi]) => `[${lo}, ${hi}]`).join(" ");

export function sccUidAdmission(api: ObjectApi): AdmissionPlugin {
  const namespaces = api.type("", "namespaces");
  return {
    mutate(r) {
      if (r.t.group !== "" || r.t.resource !== "pods" || r.operation !== "CREATE") return;
      const ns = api.tryGet(namespaces, undefined, r.obj.metadata.namespace ?? "default");
      const annotations = ns?.metadata.annotations ?? {};
      const uidAnnotation = annotations[sccUidRangeAnnotation];
      if (uidAnnotation === undefined) return;
      const uids = ranges(uidAnnotation);
      const groups = ranges(annotations[sccGroupsAnnotation] ?? uidAnnotation);
      const [firstUid, firstGroup] = [uids[0]?.[0], groups[0]?.[0]];
      if (firstUid === undefined || firstGroup === undefined) return;
      const spec = isObject(r.obj.spec) ? r.obj.spec : (r.obj.spec = {});
      const pod: JsonObject = isObject(spec.securityContext) ? spec.securityContext : (spec.securityContext = {});
      const problems: string[] = [];
      if (typeof pod.fsGroup === "number") {
        if (!within(groups, pod.fsGroup))
          problems.push(
            `.spec.securityContext.fsGroup: Invalid value: []int64{${pod.fsGroup}}: ${pod.fsGroup} is not an allowed group`,
          );
      } else {
        pod.fsGroup = firstGroup;
      }
      for (const [field, list] of [
        ["initContainers", arr(spec.initContainers)],
        ["containers", arr(spec.containers)],
      ] as const) {
        list.forEach((c, i) => {
          const sc: JsonObject = isObject(c.securityContext) ? c.securityContext : (c.securityContext = {});
          const uid = sc.runAsUser ?? pod.runAsUser;
          if (typeof uid !== "number") sc.runAsUser = firstUid;
          else if (!within(uids, uid))
            problems.push(`.${field}[${i}].runAsUser: Invalid value: ${uid}: must be in the ranges: ${shown(uids)}`);
        });
      }
      if (problems.length === 0) return;
      const name = r.obj.metadata.name ?? r.obj.metadata.generateName ?? "";
      const message = `pods "${name}" is forbidden: unable to validate against any security context constraint: [${problems.map((p) => `provider restricted-v2: ${p}`).join(", ")}]`;
      throw new StatusError(403, "Forbidden", message, { name, kind: "pods" });
    },
  };
}
