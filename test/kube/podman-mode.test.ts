// The test cluster's podman mode: containers of images mapped to local podman images run as
// real containers (runc), so the image's own filesystem, entrypoint and users, a read-only
// root, mounts, env and Secret/ConfigMap volumes are what a real node gives them.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { assertStarted, startedContainers } from "../support/chart-cluster.js";
import { ensureImages, podman, podmanUnavailable, type BuiltImages } from "../support/podman.js";
import { fastTimings, freshNamespace, kube, pod, startTestCluster, until, type TestCluster } from "./cluster.js";

const unavailable = podmanUnavailable();

describe("test cluster podman mode", { skip: unavailable }, () => {
  let c: TestCluster;
  let ns: string;
  let built: BuiltImages;
  // A host directory the node provides read-only to containers of "example.test/mounted"
  // (podmanMounts); made in `before`, which a skipped suite never runs.
  let provided = "";
  before(
    async () => {
      provided = mkdtempSync(join(tmpdir(), "ktc-podman-mount-"));
      writeFileSync(join(provided, "fixture.txt"), "from-the-host\n");
      built = await ensureImages();
      c = await startTestCluster({
        timings: { ...fastTimings, probeSecondMs: 50 },
        podman: { env: built.env },
        images: {
          "debian:bookworm": { podman: built.images.debian },
          "ghcr.io/drover-dev/drover": { podman: built.images.drover },
          "example.test/mounted": { podman: built.images.debian, podmanMounts: [provided] },
        },
      });
      ns = await freshNamespace(c, "podman");
    },
    { timeout: 20 * 60_000 },
  );
  after(async () => {
    await c?.close();
    if (provided) rmSync(provided, { recursive: true, force: true });
    assert.deepEqual(c?.errors ?? [], []);
  });

  const createPod = async (name: string, spec: Record<string, unknown>) => {
    const r = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 2, ...spec },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  };
  const log = async (name: string) =>
    (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${name}/log`)).body as string;
  const finished = (name: string) =>
    until(
      `${name} to finish`,
      () => pod(c, ns, name),
      (p) => ["Succeeded", "Failed"].includes(p?.status?.phase),
      120_000,
    );

  it("runs a container from the image's filesystem as its securityContext user, with a read-only root, env and root-owned Secret/ConfigMap volumes", async () => {
    assert.equal(
      (
        await kube(c, "POST", `/api/v1/namespaces/${ns}/secrets`, {
          metadata: { name: "creds" },
          stringData: { key: "s3cret" },
        })
      ).status,
      201,
    );
    assert.equal(
      (
        await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
          metadata: { name: "settings" },
          data: { mode: "strict" },
        })
      ).status,
      201,
    );
    const script = [
      "echo uid=$(id -u) gid=$(id -g) groups=$(id -G)",
      "echo debian=$(cat /etc/debian_version)",
      // The host's checkout is not in the image: the container sees its own filesystem.
      "test -e /work && echo host-visible || echo host-hidden",
      "echo secret=$(cat /secret/key) perms=$(stat -L -c %a:%u:%g /secret/key)",
      "echo config=$(cat /config/mode) env=$FROM_SECRET/$FROM_CONFIG",
      "touch /etc/probe 2>/dev/null && echo root-writable || echo root-read-only",
      "touch /scratch/x && echo scratch=$(stat -c %g /scratch/x)",
    ].join("; ");
    await createPod("real", {
      restartPolicy: "Never",
      securityContext: { runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000 },
      containers: [
        {
          name: "main",
          image: "debian:bookworm",
          command: ["sh", "-c", script],
          securityContext: { readOnlyRootFilesystem: true },
          env: [
            { name: "FROM_SECRET", valueFrom: { secretKeyRef: { name: "creds", key: "key" } } },
            { name: "FROM_CONFIG", valueFrom: { configMapKeyRef: { name: "settings", key: "mode" } } },
          ],
          volumeMounts: [
            { name: "secret", mountPath: "/secret" },
            { name: "config", mountPath: "/config" },
            { name: "scratch", mountPath: "/scratch" },
          ],
        },
      ],
      volumes: [
        { name: "secret", secret: { secretName: "creds", defaultMode: 0o440 } },
        { name: "config", configMap: { name: "settings" } },
        { name: "scratch", emptyDir: {} },
      ],
    });
    const p = await finished("real");
    const out = await log("real");
    assert.equal(p.status.phase, "Succeeded", out);
    assert.match(out, /^uid=1000 gid=1000 groups=1000 2000$/m);
    assert.match(out, /^debian=12\.\d+$/m);
    assert.match(out, /^host-hidden$/m);
    assert.match(out, /^secret=s3cret perms=440:0:2000$/m);
    assert.match(out, /^config=strict env=s3cret\/strict$/m);
    assert.match(out, /^root-read-only$/m);
    assert.match(out, /^scratch=2000$/m);
  });

  it("runs the image's own entrypoint when the pod sets only args, and an exec probe runs inside the container", async () => {
    await createPod("entry", {
      restartPolicy: "Never",
      containers: [{ name: "main", image: "ghcr.io/drover-dev/drover:test", args: ["--version"] }],
    });
    const p = await finished("entry");
    assert.equal(p.status.phase, "Succeeded", await log("entry"));
    assert.match(await log("entry"), /^\d+\.\d+\.\d+/m);

    // PID 1 of the container is its own command (the host's PID 1 is the machine's init).
    await createPod("probed", {
      containers: [
        {
          name: "main",
          image: "debian:bookworm",
          command: ["sleep", "600"],
          readinessProbe: { exec: { command: ["sh", "-c", "grep -q sleep /proc/1/cmdline"] }, periodSeconds: 1 },
        },
      ],
    });
    await until(
      "the exec readiness probe to pass",
      () => pod(c, ns, "probed"),
      (x) => x?.status?.containerStatuses?.[0]?.ready === true,
      60_000,
    );
  });

  it("bind-mounts an image's podmanMounts read-only at their own host paths", async () => {
    const script = [
      `echo fixture=$(cat ${provided}/fixture.txt)`,
      // The container runs as root: only a read-only mount stops these writes.
      `echo x > ${provided}/fixture.txt 2>/dev/null && echo file-writable || echo file-read-only`,
      `touch ${provided}/new 2>/dev/null && echo dir-writable || echo dir-read-only`,
      "echo uid=$(id -u)",
    ].join("; ");
    await createPod("mounted", {
      restartPolicy: "Never",
      containers: [{ name: "main", image: "example.test/mounted:1", command: ["sh", "-c", script] }],
    });
    const p = await finished("mounted");
    const out = await log("mounted");
    assert.equal(p.status.phase, "Succeeded", out);
    assert.match(out, /^fixture=from-the-host$/m);
    assert.match(out, /^uid=0$/m);
    assert.match(out, /^file-read-only$/m);
    assert.match(out, /^dir-read-only$/m);
    assert.deepEqual(readdirSync(provided), ["fixture.txt"]);
  });

  it("labels containers with their cluster's id, so one cluster's started containers leave out another's running at the same time", async () => {
    const since = new Date(Date.now() - 1000);
    const other = await startTestCluster({
      timings: fastTimings,
      podman: { env: built.env },
      images: { "debian:bookworm": { podman: built.images.debian } },
    });
    try {
      assert.notEqual(other.id, c.id);
      const otherNs = await freshNamespace(other, "other");
      const r = await kube(other, "POST", `/api/v1/namespaces/${otherNs}/pods`, {
        metadata: { name: "theirs" },
        spec: {
          restartPolicy: "Never",
          containers: [{ name: "elsewhere", image: "debian:bookworm", command: ["true"] }],
        },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      await createPod("ours", {
        restartPolicy: "Never",
        containers: [{ name: "here", image: "debian:bookworm", command: ["true"] }],
      });
      await until(
        "theirs to finish",
        () => pod(other, otherNs, "theirs"),
        (x) => x?.status?.phase === "Succeeded",
        120_000,
      );
      await finished("ours");

      const ours = await startedContainers(c, since);
      assertStarted(ours, built.images.debian, "here");
      assert.doesNotMatch(ours, /-elsewhere-/, ours);
      const theirs = await startedContainers(other, since);
      assertStarted(theirs, built.images.debian, "elsewhere");
      assert.doesNotMatch(theirs, /-here-/, theirs);
    } finally {
      await other.close();
    }
    assert.deepEqual(other.errors, []);
  });

  it("stops and removes the container when its pod is deleted", async () => {
    const running = await podman([
      "ps",
      "--filter",
      `label=dev.drover.kube-test-cluster.id=${c.id}`,
      "--format",
      "{{.Names}}",
    ]);
    assert.match(running.stdout, /ktc-probed-main-/);
    assert.equal((await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/probed`)).status, 200);
    await until(
      "the pod gone",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods/probed`),
      (r) => r.status === 404,
      60_000,
    );
    await until(
      "its container gone",
      () => podman(["ps", "-a", "--filter", `label=dev.drover.kube-test-cluster.id=${c.id}`, "--format", "{{.Names}}"]),
      (r) => !r.stdout.includes("ktc-probed-main-"),
      30_000,
    );
  });
});
