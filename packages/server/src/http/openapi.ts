import { errorBodySchema, errorsOf, routes, statusForCode, type Route } from "@drover/protocol";
import { z } from "zod";

const schemaOf = (schema: z.ZodType, io: "input" | "output") => z.toJSONSchema(schema, { io, unrepresentable: "any" });

/** A route's path in OpenAPI's `{param}` syntax. */
export function openApiPath(path: string): string {
  return path.replace(/:(\w+)/g, "{$1}");
}

function successResponses(route: Route): Record<string, unknown> {
  const r = route.response;
  switch (r.kind) {
    case "json":
      return {
        [String(r.status)]: {
          description: "OK",
          content: { "application/json": { schema: schemaOf(r.schema, "output") } },
        },
      };
    case "raw":
      return {
        [String(r.status)]: { description: "OK", content: { [r.contentType]: {} } },
        ...(r.emptyStatus === undefined ? {} : { [String(r.emptyStatus)]: { description: "Nothing stored yet" } }),
      };
    case "empty":
      return { [String(r.status)]: { description: r.status === 204 ? "No content" : "OK" } };
  }
}

function errorResponses(route: Route): Record<string, unknown> {
  const byStatus = new Map<number, string[]>();
  for (const code of errorsOf(route))
    byStatus.set(statusForCode(code), [...(byStatus.get(statusForCode(code)) ?? []), code]);
  const out: Record<string, unknown> = {};
  for (const [status, codes] of [...byStatus].sort((a, b) => a[0] - b[0])) {
    const schema = schemaOf(errorBodySchema, "output");
    out[String(status)] = {
      description: codes.join(", "),
      content: {
        "application/json": {
          schema: { ...schema, properties: { ...(schema.properties ?? {}), error: { type: "string", enum: codes } } },
        },
      },
    };
  }
  return out;
}

function parameters(route: Route): unknown[] {
  const path = (Object.entries(route.params.shape) as [string, z.ZodType][]).map(([name, schema]) => ({
    name,
    in: "path",
    required: true,
    schema: schemaOf(schema, "input"),
  }));
  const query = (Object.entries(route.query.shape) as [string, z.ZodType][]).map(([name, schema]) => ({
    name,
    in: "query",
    required: !schema.safeParse(undefined).success,
    schema: schemaOf(schema, "input"),
  }));
  return [...path, ...query];
}

/** The OpenAPI 3.1 document of every route in the protocol's route table. */
export function openApiDocument(serverUrl: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [name, route] of Object.entries(routes) as [string, Route][]) {
    const operation: Record<string, unknown> = {
      operationId: name,
      summary: route.summary,
      parameters: parameters(route),
      responses: { ...successResponses(route), ...errorResponses(route) },
      security: route.auth === "none" ? [] : [{ bearer: [] }],
      "x-drover-auth": route.auth,
    };
    if (route.body.kind === "json")
      operation.requestBody = {
        required: true,
        content: { "application/json": { schema: schemaOf(route.body.schema, "input") } },
      };
    if (route.body.kind === "raw")
      operation.requestBody = { required: true, content: { [route.body.contentType]: {} } };
    // LOCK and UNLOCK are not OpenAPI methods; they are kept under an x- key so nothing is left out.
    const method = ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(route.method)
      ? route.method.toLowerCase()
      : `x-${route.method.toLowerCase()}`;
    (paths[openApiPath(route.path)] ??= {})[method] = operation;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Drover API",
      version: "0.1.0",
      description:
        "Drover control plane: user API (/api/v1), agent protocol (/api/agent/v1), terraform http state backend.",
    },
    servers: [{ url: serverUrl }],
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    paths,
  };
}
