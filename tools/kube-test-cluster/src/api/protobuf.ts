/**
 * Just enough of Kubernetes' protobuf encoding to read the access reviews kubectl sends
 * as protobuf (`kubectl auth can-i`): the `k8s\0` envelope (runtime.Unknown) and the
 * SelfSubjectAccessReview/SubjectAccessReview/LocalSubjectAccessReview fields.
 */
import { badRequest } from "./status-error.js";
import type { JsonObject } from "./types.js";

type Fields = Map<number, (Buffer | number)[]>;

function fields(buf: Buffer): Fields {
  const out: Fields = new Map();
  let i = 0;
  const varint = (): number => {
    let v = 0;
    let shift = 0;
    for (;;) {
      if (i >= buf.length) throw badRequest("truncated protobuf body");
      const b = buf[i++] ?? 0;
      v += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return v;
      shift += 7;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const field = Math.floor(key / 8);
    const wire = key & 7;
    let value: Buffer | number;
    if (wire === 0) value = varint();
    else if (wire === 2) {
      const len = varint();
      value = buf.subarray(i, i + len);
      i += len;
    } else if (wire === 1) {
      value = 0;
      i += 8;
    } else if (wire === 5) {
      value = 0;
      i += 4;
    } else throw badRequest(`unsupported protobuf wire type ${wire}`);
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

function str(f: Fields, n: number): string | undefined {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) ? v.toString("utf8") : undefined;
}

function sub(f: Fields, n: number): Fields | undefined {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) ? fields(v) : undefined;
}

function compact(o: Record<string, unknown>): JsonObject {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as JsonObject;
}

/** Decodes an access review sent as `application/vnd.kubernetes.protobuf` into its JSON form. */
export function decodeAccessReview(body: Buffer): JsonObject {
  if (body.subarray(0, 4).toString("latin1") !== "k8s\0") throw badRequest("protobuf body without the k8s envelope");
  const unknown = fields(body.subarray(4));
  const typeMeta = sub(unknown, 1);
  const kind = typeMeta ? str(typeMeta, 2) : undefined;
  const raw = unknown.get(2)?.[0];
  if (!Buffer.isBuffer(raw) || !kind || !/Subject(Access|Rules)Review$/.test(kind))
    throw badRequest(`protobuf bodies are only supported for access reviews (got ${kind ?? "nothing"})`);
  if (kind === "SelfSubjectRulesReview") {
    const rulesSpec = sub(fields(raw), 2);
    return {
      apiVersion: "authorization.k8s.io/v1",
      kind,
      spec: compact({ namespace: rulesSpec ? str(rulesSpec, 1) : undefined }),
    };
  }
  const spec: Fields = sub(fields(raw), 2) ?? new Map<number, (Buffer | number)[]>();
  const ra = sub(spec, 1);
  const nra = sub(spec, 2);
  const self = kind === "SelfSubjectAccessReview";
  return {
    apiVersion: typeMeta ? (str(typeMeta, 1) ?? "authorization.k8s.io/v1") : "authorization.k8s.io/v1",
    kind,
    spec: compact({
      resourceAttributes:
        ra &&
        compact({
          namespace: str(ra, 1),
          verb: str(ra, 2),
          group: str(ra, 3),
          version: str(ra, 4),
          resource: str(ra, 5),
          subresource: str(ra, 6),
          name: str(ra, 7),
        }),
      nonResourceAttributes: nra && compact({ path: str(nra, 1), verb: str(nra, 2) }),
      ...(self
        ? {}
        : {
            user: str(spec, 3),
            groups: (spec.get(4) ?? []).filter((b): b is Buffer => Buffer.isBuffer(b)).map((b) => b.toString("utf8")),
          }),
    }),
  };
}
