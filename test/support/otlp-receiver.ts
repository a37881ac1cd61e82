// An OTLP/HTTP receiver for tests: a plain HTTP server on 127.0.0.1 taking protobuf export
// requests on /v1/traces and /v1/metrics, decoded with a minimal protobuf wire reader over the
// field numbers of opentelemetry-proto (trace/v1, metrics/v1, common/v1, resource/v1).
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One decoded span. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  statusCode: number;
  statusMessage: string;
  resource: Record<string, string | number | boolean>;
}

/** One decoded metric (name and kind, with its data points' attributes and values). */
export interface ReceivedMetric {
  name: string;
  kind: "gauge" | "sum" | "histogram" | "other";
  /** Gauge and sum points: their value; histogram points: their count, with sum and per-bucket counts. */
  points: Array<{
    attributes: Record<string, string | number | boolean>;
    value: number;
    sum?: number;
    bounds?: number[];
    counts?: number[];
  }>;
  resource: Record<string, string | number | boolean>;
}

type Field = { no: number; wire: number; value: bigint | Buffer };

/** The fields of one protobuf message, in order. */
function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[i++]!;
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const no = key >> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, wire, value: varint() });
    else if (wire === 1) {
      out.push({ no, wire, value: buf.subarray(i, i + 8) });
      i += 8;
    } else if (wire === 2) {
      const len = Number(varint());
      out.push({ no, wire, value: buf.subarray(i, i + len) });
      i += len;
    } else if (wire === 5) {
      out.push({ no, wire, value: buf.subarray(i, i + 4) });
      i += 4;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const all = (fs: Field[], no: number) => fs.filter((f) => f.no === no).map((f) => f.value);
const msgs = (fs: Field[], no: number) => all(fs, no).map((v) => fields(v as Buffer));
const bytes = (fs: Field[], no: number) => (all(fs, no)[0] as Buffer | undefined) ?? Buffer.alloc(0);
const text = (fs: Field[], no: number) => bytes(fs, no).toString("utf8");
const fixed64 = (fs: Field[], no: number) => {
  const b = all(fs, no)[0] as Buffer | undefined;
  return b ? b.readBigUInt64LE(0) : 0n;
};

/** common.v1.AnyValue: string 1, bool 2, int 3, double 4. */
function anyValue(fs: Field[]): string | number | boolean {
  for (const f of fs) {
    if (f.no === 1) return (f.value as Buffer).toString("utf8");
    if (f.no === 2) return f.value === 1n;
    if (f.no === 3) return Number(BigInt.asIntN(64, f.value as bigint));
    if (f.no === 4) return (f.value as Buffer).readDoubleLE(0);
  }
  return "";
}

/** repeated common.v1.KeyValue at field `no`: key 1, value 2. */
function attributes(fs: Field[], no: number): Record<string, string | number | boolean> {
  return Object.fromEntries(msgs(fs, no).map((kv) => [text(kv, 1), anyValue(msgs(kv, 2)[0] ?? [])]));
}

/** ExportTraceServiceRequest → spans. */
export function decodeTraces(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of msgs(fields(body), 1)) {
    const resource = attributes(msgs(rs, 1)[0] ?? [], 1);
    for (const ss of msgs(rs, 2)) {
      for (const sp of msgs(ss, 2)) {
        const status = msgs(sp, 15)[0] ?? [];
        spans.push({
          traceId: bytes(sp, 1).toString("hex"),
          spanId: bytes(sp, 2).toString("hex"),
          parentSpanId: bytes(sp, 4).toString("hex"),
          name: text(sp, 5),
          startNs: fixed64(sp, 7),
          endNs: fixed64(sp, 8),
          attributes: attributes(sp, 9),
          statusCode: Number((all(status, 3)[0] as bigint | undefined) ?? 0n),
          statusMessage: text(status, 2),
          resource,
        });
      }
    }
  }
  return spans;
}

/** NumberDataPoint: attributes 7, as_double 4 (fixed64), as_int 6 (sfixed64). */
function numberPoint(fs: Field[]): { attributes: Record<string, string | number | boolean>; value: number } {
  const d = all(fs, 4)[0] as Buffer | undefined;
  const n = all(fs, 6)[0] as Buffer | undefined;
  return { attributes: attributes(fs, 7), value: d ? d.readDoubleLE(0) : n ? Number(n.readBigInt64LE(0)) : 0 };
}

/** HistogramDataPoint: attributes 9, count 4 (fixed64), sum 5 (double), bucket_counts 6 (packed fixed64), explicit_bounds 7 (packed double). */
function histogramPoint(fs: Field[]): ReceivedMetric["points"][number] {
  const packed = (no: number, read: (b: Buffer, at: number) => number) => {
    const b = all(fs, no)[0] as Buffer | undefined;
    return b ? Array.from({ length: b.length / 8 }, (_, i) => read(b, i * 8)) : [];
  };
  const sum = all(fs, 5)[0] as Buffer | undefined;
  return {
    attributes: attributes(fs, 9),
    value: Number(fixed64(fs, 4)),
    ...(sum ? { sum: sum.readDoubleLE(0) } : {}),
    counts: packed(6, (b, at) => Number(b.readBigUInt64LE(at))),
    bounds: packed(7, (b, at) => b.readDoubleLE(at)),
  };
}

/** ExportMetricsServiceRequest → metrics (gauge 5, sum 7, histogram 9; data points field 1). */
export function decodeMetrics(body: Buffer): ReceivedMetric[] {
  const out: ReceivedMetric[] = [];
  for (const rm of msgs(fields(body), 1)) {
    const resource = attributes(msgs(rm, 1)[0] ?? [], 1);
    for (const sm of msgs(rm, 2)) {
      for (const m of msgs(sm, 2)) {
        const gauge = msgs(m, 5)[0];
        const sum = msgs(m, 7)[0];
        const histogram = msgs(m, 9)[0];
        const kind = gauge ? "gauge" : sum ? "sum" : histogram ? "histogram" : "other";
        const points = histogram
          ? msgs(histogram, 1).map(histogramPoint)
          : msgs(gauge ?? sum ?? [], 1).map(numberPoint);
        out.push({ name: text(m, 1), kind, points, resource });
      }
    }
  }
  return out;
}

/** A running receiver; everything it got so far. */
export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  metrics: ReceivedMetric[];
  /** Request paths, content types and headers seen, for protocol checks; `at`: arrival (ms since the epoch). */
  requests: Array<{
    path: string;
    contentType: string;
    headers: Record<string, string | string[] | undefined>;
    at: number;
  }>;
  close(): Promise<void>;
}

/** Starts a receiver on 127.0.0.1 and a free port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const metrics: ReceivedMetric[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      requests.push({
        path: req.url ?? "",
        contentType: req.headers["content-type"] ?? "",
        headers: req.headers,
        at: Date.now(),
      });
      try {
        if (req.url === "/v1/traces") spans.push(...decodeTraces(body));
        else if (req.url === "/v1/metrics") metrics.push(...decodeMetrics(body));
        else return void res.writeHead(404).end();
      } catch (err) {
        return void res.writeHead(400).end(String(err));
      }
      // An empty ExportServiceResponse.
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metrics,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Asserts a job's stage span follows the stage before it: the stages run one after the other.
 * (1 ms of slack: the SDK's timestamps are float milliseconds.)
 */
export function assertStageOrder(
  name: string,
  stage: { startNs: bigint; endNs: bigint },
  previous: { startNs: bigint; endNs: bigint },
): void {
  const slack = 1_000_000n;
  assert.ok(stage.startNs >= previous.endNs - slack, `${name} starts after the stage before it`);
}
