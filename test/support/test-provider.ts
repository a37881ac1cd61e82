/*
 * A terraform provider small enough for tests and real enough for runs: plugin protocol 6 over
 * gRPC, go-plugin's handshake on stdout, mutual TLS when terraform asks for it. It serves one
 * resource, `<type>_thing { input = "…" }`, whose state is its configuration.
 *
 * Started as `node test-provider.js <type> <cert.pem> <key.pem>` by the launcher a test
 * package holds (see provider-registry.ts).
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const protoDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures", "tfplugin");

type Call = grpc.ServerUnaryCall<Record<string, unknown>, unknown>;
type Reply = grpc.sendUnaryData<unknown>;

function load(file: string): grpc.GrpcObject {
  const def = protoLoader.loadSync(join(protoDir, file), {
    keepCase: true,
    longs: Number,
    defaults: false,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def);
}

function service(pkg: grpc.GrpcObject, path: string[]): grpc.ServiceDefinition {
  let at: unknown = pkg;
  for (const p of path) at = (at as Record<string, unknown>)[p];
  return (at as { service: grpc.ServiceDefinition }).service;
}

function main(): void {
  const [type, certPath, keyPath] = process.argv.slice(2);
  if (!type || !certPath || !keyPath) {
    process.stderr.write("usage: test-provider <type> <cert.pem> <key.pem>\n");
    process.exit(2);
  }
  if (!process.env.TF_PLUGIN_MAGIC_COOKIE) {
    process.stderr.write("This binary is a plugin: terraform starts it.\n");
    process.exit(1);
  }
  const stringType = Buffer.from(JSON.stringify("string"));
  const thingSchema = {
    version: 0,
    block: {
      version: 0,
      attributes: [{ name: "input", type: stringType, required: true, description: "kept as given" }],
    },
  };
  const ok = (reply: Reply, body: Record<string, unknown> = {}): void => reply(null, body);
  const server = new grpc.Server();
  server.addService(service(load("tfplugin6-subset.proto"), ["tfplugin6", "Provider"]), {
    GetProviderSchema: (_c: Call, r: Reply) =>
      ok(r, {
        provider: { version: 0, block: { version: 0, attributes: [] } },
        resource_schemas: { [`${type}_thing`]: thingSchema },
        data_source_schemas: {},
        server_capabilities: { plan_destroy: false, get_provider_schema_optional: false },
      }),
    ValidateProviderConfig: (_c: Call, r: Reply) => ok(r),
    ValidateResourceConfig: (_c: Call, r: Reply) => ok(r),
    UpgradeResourceState: (c: Call, r: Reply) =>
      ok(r, {
        upgraded_state: { json: (c.request.raw_state as { json?: Buffer } | undefined)?.json ?? Buffer.from("null") },
      }),
    ConfigureProvider: (_c: Call, r: Reply) => ok(r),
    ReadResource: (c: Call, r: Reply) => ok(r, { new_state: c.request.current_state, private: c.request.private }),
    PlanResourceChange: (c: Call, r: Reply) =>
      ok(r, { planned_state: c.request.proposed_new_state, planned_private: c.request.prior_private }),
    ApplyResourceChange: (c: Call, r: Reply) =>
      ok(r, { new_state: c.request.planned_state, private: c.request.planned_private }),
    StopProvider: (_c: Call, r: Reply) => ok(r, { Error: "" }),
  });
  server.addService(service(load("plugin-host.proto"), ["grpc", "health", "v1", "Health"]), {
    Check: (_c: Call, r: Reply) => ok(r, { status: 1 }),
  });
  server.addService(service(load("plugin-controller.proto"), ["plugin", "GRPCController"]), {
    Shutdown: (_c: Call, r: Reply) => {
      ok(r);
      setImmediate(() => server.tryShutdown(() => process.exit(0)));
    },
  });
  // go-plugin's AutoMTLS: terraform hands its certificate over and trusts the one printed here.
  const clientCert = process.env.PLUGIN_CLIENT_CERT;
  const cert = readFileSync(certPath);
  const credentials = clientCert
    ? grpc.ServerCredentials.createSsl(
        Buffer.from(clientCert),
        [{ cert_chain: cert, private_key: readFileSync(keyPath) }],
        true,
      )
    : grpc.ServerCredentials.createInsecure();
  server.bindAsync("127.0.0.1:0", credentials, (err, port) => {
    if (err) {
      process.stderr.write(`${err.message}\n`);
      process.exit(1);
    }
    const der = Buffer.from(
      cert
        .toString("utf8")
        .replace(/-----[^-]+-----/g, "")
        .replace(/\s+/g, ""),
      "base64",
    );
    const certField = clientCert ? `|${der.toString("base64").replace(/=+$/, "")}` : "";
    process.stdout.write(`1|6|tcp|127.0.0.1:${port}|grpc${certField}\n`);
  });
  // terraform ends a provider through GRPCController.Shutdown, else kills it; Ctrl-C is terraform's to handle.
  process.on("SIGINT", () => undefined);
}

main();
