import { DroverError } from "@drover/protocol";
import { z } from "zod";

/*
 * The JSON:API documents terraform's `cloud` block (go-tfe over hashicorp/jsonapi) reads and
 * writes. Stock clients send bodies that are not strict JSON:API (an empty `type`, no `id`,
 * plain `{}`), so request documents are read leniently: unknown members are ignored and only
 * what a handler needs is checked.
 */

export const jsonApiContentType = "application/vnd.api+json";

/** `{type, id}` of a related resource. */
export interface ResourceIdentifier {
  type: string;
  id: string;
}

export interface Relationship {
  data: ResourceIdentifier | ResourceIdentifier[] | null;
}

/** One resource: attributes in the client's kebab-case names. */
export interface ResourceObject {
  id: string;
  type: string;
  attributes: Record<string, unknown>;
  relationships?: Record<string, Relationship>;
  links?: Record<string, string>;
}

/** go-tfe's pagination: without `next-page` while `total-pages > current-page` it loops forever. */
export interface Pagination {
  "current-page": number;
  "next-page": number | null;
  "prev-page": number | null;
  "total-pages": number;
  "total-count": number;
}

export interface Document {
  data: ResourceObject | ResourceObject[] | null;
  included?: ResourceObject[];
  meta?: { pagination: Pagination } & Record<string, unknown>;
}

/** A single-resource document; `included` only when something was included. */
export function one(data: ResourceObject, included: ResourceObject[] = []): Document {
  return included.length > 0 ? { data, included } : { data };
}

/** A page of a list, with its pagination meta. */
export function many(data: ResourceObject[], pagination: Pagination, included: ResourceObject[] = []): Document {
  return { data, ...(included.length > 0 ? { included } : {}), meta: { pagination } };
}

/** The page a list asks for: `page[number]` from 1, `page[size]` up to 100 (20 unless given). */
export interface PageRequest {
  number: number;
  size: number;
}

const defaultPageSize = 20;
const maxPageSize = 100;

export function pageRequest(query: Record<string, unknown>): PageRequest {
  const int = (key: string, fallback: number) => {
    const raw = query[key];
    const n = typeof raw === "string" && /^\d+$/.test(raw) ? Number(raw) : NaN;
    return Number.isSafeInteger(n) && n > 0 ? n : fallback;
  };
  return { number: int("page[number]", 1), size: Math.min(int("page[size]", defaultPageSize), maxPageSize) };
}

/** One page of `items` and its meta. */
export function paginate<T>(items: readonly T[], page: PageRequest): { items: T[]; pagination: Pagination } {
  const totalPages = Math.max(1, Math.ceil(items.length / page.size));
  const current = page.number;
  return {
    items: items.slice((current - 1) * page.size, current * page.size),
    pagination: {
      "current-page": current,
      "next-page": current < totalPages ? current + 1 : null,
      "prev-page": current > 1 ? current - 1 : null,
      "total-pages": totalPages,
      "total-count": items.length,
    },
  };
}

/**
 * The `include` names a request asks for. Unknown ones are ignored, never refused: go-tfe turns
 * a 400 about them into an error terraform does not recognise and the command fails.
 */
export function includes(query: Record<string, unknown>): Set<string> {
  const raw = query.include;
  const text = Array.isArray(raw) ? raw.join(",") : typeof raw === "string" ? raw : "";
  return new Set(
    text
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== ""),
  );
}

/** A JSON:API error the handler means: status, a short title and what went wrong. */
export class JsonApiError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
  ) {
    super(detail);
  }
}

/** The body go-tfe decodes into its error: it prints `title` and `detail`. */
export function errorBody(status: number, title: string, detail?: string) {
  return { errors: [{ status: String(status), title, ...(detail === undefined ? {} : { detail }) }] };
}

/** Status and JSON:API body of any error a handler throws (a DroverError keeps its status). */
export function errorOf(err: unknown): { status: number; body: ReturnType<typeof errorBody> } | undefined {
  if (err instanceof JsonApiError) return { status: err.status, body: errorBody(err.status, err.title, err.detail) };
  if (err instanceof DroverError) {
    // go-tfe reads a 423 as nothing it knows; a held lock is a conflict in this API.
    const status = err.code === "state_locked" ? 409 : err.status;
    return { status, body: errorBody(status, titleOf(status), err.message) };
  }
  return undefined;
}

const titles: Record<number, string> = {
  400: "bad request",
  401: "unauthorized",
  403: "forbidden",
  404: "not found",
  409: "conflict",
  413: "payload too large",
  415: "unsupported media type",
  422: "invalid attribute",
  429: "too many requests",
  503: "service unavailable",
  507: "insufficient storage",
};

export function titleOf(status: number): string {
  return titles[status] ?? (status >= 500 ? "internal server error" : "error");
}

/** The `data` of a request document, read leniently: `type` may be empty, `id` absent. */
export interface RequestResource {
  type: string;
  id: string | undefined;
  attributes: Record<string, unknown>;
  relationships: Record<string, unknown>;
}

const resourceSchema = z.object({
  type: z.string().optional(),
  id: z.string().optional(),
  attributes: z.record(z.string(), z.unknown()).optional(),
  relationships: z.record(z.string(), z.unknown()).optional(),
});

/** Parses a request body's bytes as JSON: undefined when empty; malformed JSON is a 400. */
export function jsonBody(body: Buffer | undefined): unknown {
  if (body === undefined || body.length === 0 || body.toString("utf8").trim() === "") return undefined;
  try {
    return JSON.parse(body.toString("utf8")) as unknown;
  } catch (err) {
    throw new JsonApiError(400, "malformed JSON", `the request body is not JSON: ${(err as Error).message}`);
  }
}

/** The single resource of a request document (`{"data":{...}}`); a body without one is a 422. */
export function requestResource(body: Buffer | undefined): RequestResource {
  const doc = jsonBody(body);
  if (typeof doc !== "object" || doc === null || !("data" in doc))
    throw new JsonApiError(422, "invalid document", "the request body must be a JSON:API document with `data`");
  const data = resourceSchema.safeParse((doc as { data: unknown }).data);
  if (!data.success)
    throw new JsonApiError(
      422,
      "invalid document",
      `\`data\` must be one resource object: ${data.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    );
  return {
    type: data.data.type ?? "",
    id: data.data.id,
    attributes: data.data.attributes ?? {},
    relationships: data.data.relationships ?? {},
  };
}

/** Checks one attribute with a schema; a wrong value is a 422 naming it. */
export function attribute<S extends z.ZodType>(
  resource: RequestResource,
  name: string,
  schema: S,
): z.output<S> | undefined {
  const value = resource.attributes[name];
  if (value === undefined || value === null) return undefined;
  const checked = schema.safeParse(value);
  if (!checked.success)
    throw new JsonApiError(
      422,
      "invalid attribute",
      `attribute ${name}: ${checked.error.issues.map((i) => i.message).join("; ")}`,
    );
  return checked.data;
}

/** A time as go-tfe's `iso8601` tag parses it: UTC with `Z`, never an offset. */
export const isoTime = (ms: number): string => new Date(ms).toISOString();
