import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { helmTemplate } from "../support/helm.js";

// The values a user of the seed charts carries over (each chart README's parity table), each
// rendered and checked in the object it must reach. test/charts/parity-cluster.test.ts installs
// them on the test cluster and checks the running pods.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string };
};
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";

type Obj = {
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: any;
  subjects?: any[];
  stringData?: Record<string, string>;
};

function render(chart: string, args: string[]): Obj[] {
  const out = helmTemplate([
    "template",
    "rel",
    join(repo, "charts", chart),
    "--namespace",
    "drover",
    "--set",
    `agent.token=${token}`,
    ...args,
  ]);
  return parseAllDocuments(out, { uniqueKeys: true, strict: true })
    .map((d) => d.toJSON() as Obj | null)
    .filter((o): o is Obj => o !== null);
}

const jobCharts = ["agent-job", "agent-k8s"];
const allCharts = ["agent-local", ...jobCharts];

/** Every pod template a chart renders, by owner: the agent or controller, node workers, task pods. */
function pods(objects: Obj[]): { owner: string; meta: any; spec: any }[] {
  return objects.flatMap((o) => {
    if (o.kind === "Deployment" || o.kind === "DaemonSet")
      return [{ owner: o.kind, meta: o.spec.template.metadata, spec: o.spec.template.spec }];
    if (o.kind === "AgentTask")
      return [{ owner: "task", meta: o.spec.jobTemplate.template.metadata, spec: o.spec.jobTemplate.template.spec }];
    return [];
  });
}
const containers = (spec: any): any[] => [...spec.containers, ...(spec.initContainers ?? [])];
const byOwner = (objects: Obj[], owner: string) => pods(objects).find((p) => p.owner === owner)!;

describe("global.imageRegistry", () => {
  for (const chart of allCharts) {
    test(`${chart}: every image moves to the registry, its own registry host replaced`, () => {
      const all = render(chart, ["--set", "global.imageRegistry=mirror.example.com/ghcr", "--set", "image.tag=1.2.3"]);
      const images = pods(all).flatMap((p) => containers(p.spec).map((c) => c.image as string));
      assert.ok(images.length > 0);
      for (const image of images) assert.match(image, /^mirror\.example\.com\/ghcr\/drover-dev\//, image);
      assert.ok(images.includes("mirror.example.com/ghcr/drover-dev/drover:1.2.3"), images.join(" "));
      if (chart !== "agent-local") {
        const controller = byOwner(all, "Deployment").spec.containers[0];
        const workerImage = controller.env.find((e: any) => e.name === "DROVER_AGENT_KUBERNETES_WORKER_IMAGE");
        if (chart === "agent-job") assert.equal(workerImage.value, "mirror.example.com/ghcr/drover-dev/drover:1.2.3");
      }
      // A repository without a registry host is put under it whole.
      const plain = render(chart, [
        "--set",
        "global.imageRegistry=mirror.example.com",
        "--set",
        "image.repository=team/drover",
        "--set-string",
        "image.tag=1",
      ]);
      assert.ok(
        pods(plain)
          .flatMap((p) => containers(p.spec).map((c) => c.image))
          .includes("mirror.example.com/team/drover:1"),
      );
      // Unset: images as given.
      assert.ok(pods(render(chart, [])).every((p) => containers(p.spec).every((c) => /^ghcr\.io\//.test(c.image))));
    });
  }
});

describe("global.podAnnotations and global.podLabels", () => {
  for (const chart of allCharts) {
    test(`${chart}: every pod gets them, a pod's own values win, selector labels stay the chart's`, () => {
      const all = render(chart, [
        "--set",
        "global.podAnnotations.owner=platform",
        "--set",
        "global.podAnnotations.team=global",
        "--set",
        "global.podLabels.tier=infra",
        "--set",
        "global.podLabels.app\\.kubernetes\\.io/instance=hijack",
        "--set",
        "podAnnotations.team=own",
      ]);
      const ps = pods(all);
      assert.ok(ps.length >= (chart === "agent-local" ? 1 : 2));
      for (const p of ps) {
        assert.equal(p.meta.annotations?.owner, "platform", `${chart} ${p.owner}`);
        assert.equal(p.meta.labels?.tier, "infra", `${chart} ${p.owner}`);
        assert.equal(p.meta.labels["app.kubernetes.io/instance"], "rel", `${chart} ${p.owner}`);
      }
      assert.equal(ps.find((p) => p.owner === "Deployment")!.meta.annotations.team, "own");
    });
  }
});

describe("serviceAccount.{create,name,labels}", () => {
  for (const chart of jobCharts) {
    test(`${chart}: created with its labels by default; create=false uses the named account and binds the Role to it`, () => {
      const created = render(chart, ["--set", "serviceAccount.labels.team=platform"]);
      const sa = created.find(
        (o) => o.kind === "ServiceAccount" && o.metadata.name === "rel-" + chart + "-controller",
      )!;
      assert.equal(sa.metadata.labels?.team, "platform");
      assert.equal(byOwner(created, "Deployment").spec.serviceAccountName, sa.metadata.name);
      const named = render(chart, ["--set", "serviceAccount.name=ctl"]);
      assert.ok(named.some((o) => o.kind === "ServiceAccount" && o.metadata.name === "ctl"));
      const existing = render(chart, [
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=platform-sa",
      ]);
      assert.ok(
        !existing.some((o) => o.kind === "ServiceAccount" && /controller|platform-sa/.test(o.metadata.name)),
        "no controller ServiceAccount is created",
      );
      assert.equal(byOwner(existing, "Deployment").spec.serviceAccountName, "platform-sa");
      const binding = existing.find((o) => o.kind === "RoleBinding" && o.metadata.name.endsWith("-controller"))!;
      assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: "platform-sa", namespace: "drover" }]);
      const r = spawnSync(
        tools().helm,
        [
          "template",
          "rel",
          join(repo, "charts", chart),
          "--set",
          `agent.token=${token}`,
          "--set",
          "serviceAccount.create=false",
        ],
        { encoding: "utf8" },
      );
      assert.notEqual(r.status, 0);
      assert.match(r.stderr, /serviceAccount\.name: name the existing ServiceAccount/);
    });
  }
  test("agent-local: labels of the created ServiceAccount", () => {
    const sa = render("agent-local", ["--set", "serviceAccount.labels.team=platform"]).find(
      (o) => o.kind === "ServiceAccount",
    )!;
    assert.equal(sa.metadata.labels?.team, "platform");
  });
});

describe("secret.{annotations,labels}", () => {
  for (const chart of allCharts) {
    test(`${chart}: on every Secret the chart creates`, () => {
      const args = [
        "--set",
        "secret.annotations.sync=off",
        "--set",
        "secret.labels.backup=no",
        "--set-string",
        "agent.caBundle=PEM",
      ];
      if (chart !== "agent-local") args.push("--set-string", "task.caBundle=RUNPEM");
      const secrets = render(chart, args).filter((o) => o.kind === "Secret");
      assert.equal(secrets.length, chart === "agent-local" ? 2 : 3);
      for (const s of secrets) {
        assert.equal(s.metadata.annotations?.sync, "off", s.metadata.name);
        assert.equal(s.metadata.labels?.backup, "no", s.metadata.name);
      }
    });
  }
});

describe("extraEnvFrom", () => {
  for (const chart of allCharts) {
    test(`${chart}: the agent${chart === "agent-k8s" ? ", controller and node worker" : ""} containers take it`, () => {
      const all = render(chart, [
        "--set",
        "extraEnvFrom[0].configMapRef.name=extra",
        "--set",
        "extraEnvFrom[1].secretRef.name=creds",
      ]);
      const want = [{ configMapRef: { name: "extra" } }, { secretRef: { name: "creds" } }];
      const owners = chart === "agent-k8s" ? ["Deployment", "DaemonSet"] : ["Deployment"];
      for (const owner of owners) assert.deepEqual(byOwner(all, owner).spec.containers[0].envFrom, want, owner);
      assert.equal(byOwner(render(chart, []), "Deployment").spec.containers[0].envFrom, undefined);
    });
  }
});

describe("priorityClassName and topologySpreadConstraints", () => {
  const spread = { maxSkew: 1, topologyKey: "topology.kubernetes.io/zone", whenUnsatisfiable: "ScheduleAnyway" };
  for (const chart of allCharts) {
    test(`${chart}: on the pods each value names`, () => {
      const args = [
        "--set",
        "priorityClassName=ctl-prio",
        "--set",
        "topologySpreadConstraints[0].maxSkew=1",
        "--set",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "--set",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
      ];
      if (chart !== "agent-local")
        args.push(
          "--set",
          "task.priorityClassName=runs-prio",
          "--set",
          "task.topologySpreadConstraints[0].maxSkew=3",
          "--set",
          "task.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
          "--set",
          "task.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        );
      if (chart === "agent-k8s") args.push("--set", "workerDaemonSet.priorityClassName=system-node-critical");
      const all = render(chart, args);
      const main = byOwner(all, "Deployment").spec;
      assert.equal(main.priorityClassName, "ctl-prio");
      assert.deepEqual(main.topologySpreadConstraints, [spread]);
      if (chart !== "agent-local") {
        const task = byOwner(all, "task").spec;
        assert.equal(task.priorityClassName, "runs-prio");
        assert.deepEqual(task.topologySpreadConstraints, [
          { maxSkew: 3, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "DoNotSchedule" },
        ]);
      }
      if (chart === "agent-k8s") assert.equal(byOwner(all, "DaemonSet").spec.priorityClassName, "system-node-critical");
      for (const p of pods(render(chart, []))) {
        assert.equal(p.spec.priorityClassName, undefined, p.owner);
        assert.equal(p.spec.topologySpreadConstraints, undefined, p.owner);
      }
    });
  }
});

describe("per-container securityContext of task pods", () => {
  for (const chart of jobCharts) {
    test(`${chart}: task.runner.securityContext and task.worker.securityContext merge over securityContext for their container only`, () => {
      const jobWorker = chart === "agent-k8s" ? ["--set", "jobWorker=true"] : [];
      const all = render(chart, [
        ...jobWorker,
        "--set",
        "task.runner.securityContext.readOnlyRootFilesystem=false",
        "--set",
        "task.worker.securityContext.runAsUser=2000",
        "--set",
        "task.worker.securityContext.runAsGroup=2000",
      ]);
      const task = byOwner(all, "task").spec;
      const c = (name: string) => containers(task).find((x: any) => x.name === name)!;
      assert.equal(c("runner").securityContext.readOnlyRootFilesystem, false);
      assert.equal(c("runner").securityContext.runAsUser, 1000);
      assert.deepEqual(
        c("runner").securityContext.capabilities,
        { drop: ["ALL"] },
        "the rest of the shared context stays",
      );
      assert.equal(c("worker").securityContext.runAsUser, 2000);
      assert.equal(c("worker").securityContext.readOnlyRootFilesystem, true);
      assert.equal(c("drover-init").securityContext.runAsUser, 1000);
      assert.equal(byOwner(all, "Deployment").spec.containers[0].securityContext.runAsUser, 1000);
      // The values are not shared between renders (deepCopy): the default is untouched.
      const again = byOwner(render(chart, jobWorker), "task").spec;
      assert.equal(
        containers(again).find((x: any) => x.name === "runner").securityContext.readOnlyRootFilesystem,
        true,
      );
    });
  }
});

describe("task.caBundle: a CA bundle for runs only", () => {
  for (const chart of jobCharts) {
    test(`${chart}: the runner trusts it (SSL_CERT_FILE), over agent.caBundle; the agent's containers keep theirs`, () => {
      const all = render(chart, ["--set-string", "agent.caBundle=AGENT", "--set-string", "task.caBundle=RUNS"]);
      const secret = all.find((o) => o.kind === "Secret" && o.metadata.name === `rel-${chart}-task-ca`)!;
      assert.deepEqual(secret.stringData, { "ca.crt": "RUNS" });
      const task = byOwner(all, "task").spec;
      const runner = task.containers.find((c: any) => c.name === "runner");
      assert.equal(runner.env.find((e: any) => e.name === "SSL_CERT_FILE").value, "/etc/drover/task-ca/ca.crt");
      assert.ok(
        runner.volumeMounts.some(
          (m: any) => m.name === "task-ca" && m.mountPath === "/etc/drover/task-ca" && m.readOnly,
        ),
      );
      assert.equal(task.volumes.find((v: any) => v.name === "task-ca").secret.secretName, `rel-${chart}-task-ca`);
      const controller = byOwner(all, "Deployment").spec.containers[0];
      assert.equal(controller.env.find((e: any) => e.name === "DROVER_CA_CERT").value, "/etc/drover/ca/ca.crt");
      // An existing Secret instead; and without task.caBundle the runner keeps the agent's bundle.
      const existing = byOwner(
        render(chart, ["--set", "task.caBundleSecret.name=runs-ca", "--set", "task.caBundleSecret.key=bundle.pem"]),
        "task",
      ).spec;
      assert.equal(
        existing.containers.find((c: any) => c.name === "runner").env.find((e: any) => e.name === "SSL_CERT_FILE")
          .value,
        "/etc/drover/task-ca/bundle.pem",
      );
      assert.equal(existing.volumes.find((v: any) => v.name === "task-ca").secret.secretName, "runs-ca");
      const agentOnly = byOwner(render(chart, ["--set-string", "agent.caBundle=AGENT"]), "task").spec;
      assert.equal(
        agentOnly.containers.find((c: any) => c.name === "runner").env.find((e: any) => e.name === "SSL_CERT_FILE")
          .value,
        "/etc/drover/ca/ca.crt",
      );
    });
  }
});

describe("agent.terminationGracePeriodSeconds (the controller pod's)", () => {
  for (const chart of jobCharts) {
    test(`${chart}: sets the controller pod's grace period only; task pods keep terminationGracePeriodSeconds`, () => {
      const all = render(chart, [
        "--set",
        "agent.terminationGracePeriodSeconds=45",
        "--set",
        "terminationGracePeriodSeconds=300",
      ]);
      assert.equal(byOwner(all, "Deployment").spec.terminationGracePeriodSeconds, 45);
      assert.equal(byOwner(all, "task").spec.terminationGracePeriodSeconds, 300);
      assert.equal(byOwner(render(chart, []), "Deployment").spec.terminationGracePeriodSeconds, 30);
    });
  }
});
