import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { helmTemplate } from "../support/helm.js";

// The charts as a user installs them: helm lint and template pass, every rendered object is
// a valid Kubernetes object, and the promises of the chart READMEs hold in the output.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string; kubectl: string };
};
const { helm } = tools();
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2Qu ZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0".replace(" ", "");

type K = {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec?: any;
  rules?: any[];
  subjects?: any[];
  automountServiceAccountToken?: boolean;
};

/** What helm rendered, by chart and arguments: many tests read the same configuration, and helm is the slow part. */
const rendered = new Map<string, K[]>();

/**
 * Renders a chart and parses every document strictly: a duplicate key or any YAML warning fails. The same chart and
 * arguments are rendered once per file (unless `fresh`: a test of what two renders share); each caller gets its own
 * copy of the objects.
 */
function render(chart: string, args: string[], options: { fresh?: boolean } = {}): K[] {
  const key = JSON.stringify([chart, args]);
  let objects = options.fresh ? undefined : rendered.get(key);
  if (!objects) {
    const out = helmTemplate(["template", "rel", join(repo, "charts", chart), "--namespace", "drover", ...args], {
      fresh: options.fresh,
    });
    const docs = parseAllDocuments(out, { uniqueKeys: true, strict: true });
    assert.ok(!("empty" in docs), "no documents rendered");
    for (const d of docs) {
      const problems = [...d.errors, ...d.warnings].map((e) => e.message);
      assert.deepEqual(problems, [], `${chart} ${args.join(" ")}: invalid YAML in\n${String(d)}`);
    }
    objects = docs.map((d) => d.toJSON() as K | null).filter((o): o is K => o !== null);
    rendered.set(key, objects);
  }
  return structuredClone(objects);
}

/** Runs `helm template` once per argument list, a few at a time; the results come back in the lists' order. */
async function renderEach(
  chart: string,
  argLists: string[][],
): Promise<Array<{ status: number | null; stdout: string; stderr: string }>> {
  const results: Array<{ status: number | null; stdout: string; stderr: string }> = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < argLists.length) {
      const i = next++;
      results[i] = await new Promise((resolve, reject) => {
        const child = spawn(helm, ["template", "rel", join(repo, "charts", chart), ...argLists[i]!], {
          stdio: ["ignore", "pipe", "pipe"],
        });
        let stdout = "";
        let stderr = "";
        child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
        child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
        child.on("error", reject);
        child.on("close", (status) => resolve({ status, stdout, stderr }));
      });
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  return results;
}

function renderFails(chart: string, args: string[]): string {
  const r = spawnSync(helm, ["template", "rel", join(repo, "charts", chart), ...args], { encoding: "utf8" });
  assert.notEqual(r.status, 0, "rendering should have failed");
  return r.stderr;
}

async function validateObject(o: K): Promise<void> {
  // Custom resources: checked by their CRDs.
  if (["AgentTask", "ServiceMonitor", "PodMonitor", "CiliumNetworkPolicy"].includes(o.kind)) return;
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const dir = group ? `${group}/${version}` : version;
  const mod = (await import(`kubernetes-models/${dir}/${o.kind}`)) as Record<
    string,
    new (v: unknown) => { validate(): void }
  >;
  const Model = mod[o.kind];
  assert.ok(Model, `no model for ${o.apiVersion} ${o.kind}`);
  new Model(o).validate();
}

const podSpecs = (objects: K[]) =>
  objects.flatMap((o) => {
    if (o.kind === "Deployment" || o.kind === "DaemonSet")
      return [{ owner: `${o.kind}/${o.metadata.name}`, spec: o.spec.template.spec }];
    if (o.kind === "AgentTask")
      return [{ owner: `AgentTask/${o.metadata.name}`, spec: o.spec.jobTemplate.template.spec }];
    return [];
  });

/** AWS (also Nitro's IPv6), Alibaba Cloud, Azure WireServer; GCE's IPv6, OpenStack's IPv6 link-local. */
const metadataV4 = ["169.254.169.254/32", "100.100.100.200/32", "168.63.129.16/32"];
const metadataV6 = ["fd00:ec2::254/128", "fd20:ce::254/128", "fe80::a9fe:a9fe/128"];

// Every chart with its defaults and with each values file under its ci/.
const configurations: Array<[string, string[]]> = ["agent-local", "agent-job", "agent-k8s"].flatMap((chart) => [
  [chart, ["--set", `agent.token=${token}`]] as [string, string[]],
  ...readdirSync(join(repo, "charts", chart, "ci")).map(
    (f) => [chart, ["-f", join(repo, "charts", chart, "ci", f)]] as [string, string[]],
  ),
]);

for (const [chart, args] of configurations) {
  const label = `${chart} ${args[0] === "-f" ? args[1]!.split("/").pop() : "defaults"}`;
  describe(label, () => {
    test("helm lint passes and every rendered object is a valid Kubernetes object", async () => {
      const lint = spawnSync(helm, ["lint", join(repo, "charts", chart), ...args], { encoding: "utf8" });
      assert.equal(lint.status, 0, lint.stdout + lint.stderr);
      const objects = render(chart, args);
      assert.ok(objects.length >= 3);
      for (const o of objects) await validateObject(o);
    });

    test("secure defaults: non-root 1000, read-only root, no capabilities, RuntimeDefault seccomp, ownership changed only on mismatch", () => {
      const objects = render(chart, args);
      for (const { owner, spec } of podSpecs(objects)) {
        assert.equal(spec.securityContext.runAsNonRoot, true, owner);
        assert.equal(spec.securityContext.seccompProfile.type, "RuntimeDefault", owner);
        // The sidecar comes from the values; prepare-data-home is the opt-in root step of node preparation.
        for (const c of [...spec.containers, ...(spec.initContainers ?? [])].filter(
          (c: any) => c.name !== "log-shipper" && c.name !== "prepare-data-home",
        )) {
          assert.equal(c.securityContext.runAsUser, 1000, `${owner} ${c.name}`);
          assert.equal(c.securityContext.runAsGroup, 1000, `${owner} ${c.name}`);
          assert.equal(c.securityContext.readOnlyRootFilesystem, true, `${owner} ${c.name}`);
          assert.equal(c.securityContext.allowPrivilegeEscalation, false, `${owner} ${c.name}`);
          assert.deepEqual(c.securityContext.capabilities.drop, ["ALL"], `${owner} ${c.name}`);
        }
      }
      for (const { owner, spec } of podSpecs(objects))
        assert.equal(spec.securityContext.fsGroupChangePolicy, "OnRootMismatch", owner);
      // Static do-not-evict annotations pin idle agents' nodes (and are no-ops on DaemonSet pods): only
      // busyPodProtection marks busy agent pods, and run pods are marked by the controller.
      for (const o of objects.filter((x) => x.kind === "Deployment" || x.kind === "DaemonSet")) {
        const annotations = o.spec.template.metadata.annotations ?? {};
        assert.equal(
          annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"],
          undefined,
          `${o.kind}/${o.metadata.name}`,
        );
        assert.equal(annotations["karpenter.sh/do-not-disrupt"], undefined, `${o.kind}/${o.metadata.name}`);
      }
    });

    test("the token reaches pods only through a Secret reference", () => {
      const objects = render(chart, args);
      for (const o of objects.filter((x) => x.kind !== "Secret"))
        assert.ok(!JSON.stringify(o).includes("drv_p_"), `${o.kind}/${o.metadata.name} holds the token`);
      // Run pods and agent-k8s's node workers get no pool token at all (job tokens come per run).
      for (const { owner, spec } of podSpecs(objects).filter(
        (p) => !p.owner.startsWith("AgentTask") && !p.owner.startsWith("DaemonSet"),
      )) {
        const env = spec.containers[0].env.find((e: any) => e.name === "DROVER_TOKEN");
        assert.ok(env?.valueFrom?.secretKeyRef?.name, `${owner}: DROVER_TOKEN from a Secret`);
      }
    });

    test("every emptyDir has a sizeLimit; every Drover container and init container requests CPU, memory and ephemeral storage", () => {
      for (const { owner, spec } of podSpecs(render(chart, args))) {
        for (const v of spec.volumes ?? [])
          if (v.emptyDir) assert.ok(v.emptyDir.sizeLimit, `${owner}: emptyDir ${v.name} has no sizeLimit`);
        for (const c of [...spec.containers, ...(spec.initContainers ?? [])].filter(
          (c: any) => c.name !== "log-shipper",
        )) {
          for (const r of ["cpu", "memory", "ephemeral-storage"])
            assert.ok(c.resources?.requests?.[r], `${owner} ${c.name}: no ${r} request`);
        }
      }
    });

    test("no container declares port 0; probes only where a port is served", () => {
      for (const { owner, spec } of podSpecs(render(chart, args))) {
        for (const c of spec.containers) {
          for (const p of c.ports ?? [])
            assert.ok(p.containerPort > 0, `${owner} ${c.name}: containerPort ${p.containerPort}`);
          if (c.livenessProbe || c.readinessProbe)
            assert.ok(
              c.ports?.some((p: any) => p.name === "health"),
              `${owner} ${c.name}: a probe without a health port`,
            );
        }
      }
    });

    test("a NetworkPolicy blocks the metadata service unless allowMetadataService", () => {
      const policies = render(chart, args).filter((o) => o.kind === "NetworkPolicy");
      assert.equal(policies.length, 1);
      const [external, pods, dns] = policies[0]!.spec.egress;
      assert.deepEqual(external.to[0].ipBlock, { cidr: "0.0.0.0/0", except: metadataV4 });
      assert.deepEqual(external.to[1].ipBlock, { cidr: "::/0", except: metadataV6 }, "the IPv6 metadata endpoints too");
      // Cilium selects no pod by ipBlock: without these, DNS and in-cluster servers would be cut off.
      assert.deepEqual(pods, { to: [{ namespaceSelector: {} }] });
      assert.deepEqual(dns, {
        ports: [
          { port: 53, protocol: "UDP" },
          { port: 53, protocol: "TCP" },
        ],
      });
      assert.equal(
        render(chart, [...args, "--set", "allowMetadataService=true"]).filter((o) => o.kind === "NetworkPolicy").length,
        0,
      );
    });
  });
}

describe("render-time refusals", () => {
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    test(`${chart}: a grace period too short for the shutdown mode is refused`, () => {
      for (const [mode, tooShort] of [
        ["graceful", 29],
        ["drain", 119],
        ["force", 9],
      ] as const) {
        const err = renderFails(chart, [
          "--set",
          `agent.token=${token}`,
          "--set",
          `agent.shutdownMode=${mode}`,
          "--set",
          `terminationGracePeriodSeconds=${tooShort}`,
        ]);
        assert.match(
          err,
          new RegExp(`terminationGracePeriodSeconds ${tooShort} is too short for agent.shutdownMode ${mode}`),
        );
      }
      assert.doesNotThrow(() =>
        render(chart, [
          "--set",
          `agent.token=${token}`,
          "--set",
          "agent.shutdownMode=force",
          "--set",
          "terminationGracePeriodSeconds=10",
        ]),
      );
    });
    test(`${chart}: extraEnv may not override what the chart sets; typos fail the schema; a token is required`, () => {
      assert.match(
        renderFails(chart, ["--set", `agent.token=${token}`, "--set", "extraEnv.DROVER_TOKEN=other"]),
        /extraEnv.DROVER_TOKEN is set by the chart itself/,
      );
      assert.match(
        renderFails(chart, ["--set", `agent.token=${token}`, "--set", "extraEnv.HTTPS_PROXY=x"]),
        /extraEnv.HTTPS_PROXY is set by the chart itself/,
      );
      assert.match(
        renderFails(chart, ["--set", `agent.token=${token}`, "--set", "agent.tokn=x"]),
        /additional properties 'tokn' not allowed/,
      );
      assert.match(renderFails(chart, []), /set agent.token or agent.tokenExistingSecret.name/);
    });
  }
});

describe("podLabels (the seed's agent.podLabels)", () => {
  for (const chart of ["agent-job", "agent-k8s"]) {
    test(`${chart}: labels the controller pod, never overriding the selector labels`, () => {
      const all = render(chart, [
        "--set",
        `agent.token=${token}`,
        "--set",
        "podLabels.team=infra",
        "--set",
        "podLabels.app\\.kubernetes\\.io/instance=other",
      ]);
      const deploy = all.find((o) => o.kind === "Deployment")!;
      const labels = deploy.spec.template.metadata.labels;
      assert.equal(labels.team, "infra");
      assert.equal(labels["app.kubernetes.io/instance"], "rel");
      for (const [k, v] of Object.entries(deploy.spec.selector.matchLabels))
        assert.equal(labels[k], v, `the selector still matches on ${k}`);
    });
  }
});

describe("one controller per release (a second, not the leader, would never be Ready)", () => {
  for (const chart of ["agent-job", "agent-k8s"]) {
    test(`${chart}: agent.replicaCount other than 1 is refused with the reason; 1 renders one replica`, () => {
      for (const n of [2, 0]) {
        assert.match(
          renderFails(chart, ["--set", `agent.token=${token}`, "--set", `agent.replicaCount=${n}`]),
          new RegExp(`agent.replicaCount ${n}: exactly one controller may run`),
        );
      }
      const all = render(chart, ["--set", `agent.token=${token}`, "--set", "agent.replicaCount=1"]);
      assert.equal(all.find((o) => o.kind === "Deployment")!.spec.replicas, 1);
    });
  }
});

describe("agent-k8s node-worker specifics", () => {
  const objects = () =>
    render("agent-k8s", ["--set", `agent.token=${token}`, "--set", "workerDaemonSet.nodeSelector.pool=runs"]);

  test("a controller launches runner-only run pods; one worker per node supervises them from the hostPath data home", () => {
    const all = objects();
    const controller = all.find((o) => o.kind === "Deployment")!.spec.template.spec.containers[0];
    assert.deepEqual(controller.args, ["agent", "controller"]);
    assert.equal(controller.env.find((e: any) => e.name === "DROVER_AGENT_NODE_HOME").value, "/var/lib/drover-agent");
    const ds = all.find((o) => o.kind === "DaemonSet")!.spec.template.spec;
    const worker = ds.containers[0];
    assert.deepEqual(worker.args, ["agent", "node-worker"]);
    assert.ok(!worker.env.some((e: any) => e.name === "DROVER_TOKEN"), "the node worker holds no pool token");
    assert.equal(
      worker.env.find((e: any) => e.name === "DROVER_AGENT_NODE_NAME").valueFrom.fieldRef.fieldPath,
      "spec.nodeName",
    );
    assert.deepEqual(
      worker.volumeMounts.find((m: any) => m.name === "home").mountPath,
      "/var/lib/drover-agent",
      "mounted at the node's own path",
    );
    assert.equal(ds.volumes.find((v: any) => v.name === "home").hostPath.path, "/var/lib/drover-agent");
    assert.deepEqual(
      ds.nodeSelector,
      { "kubernetes.io/os": "linux", pool: "runs" },
      "Linux nodes by default, and the values' own keys",
    );
    const task = all.find((o) => o.kind === "AgentTask")!.spec.jobTemplate.template.spec;
    assert.deepEqual(
      task.containers.map((c: any) => c.name),
      ["runner"],
      "no worker container in run pods",
    );
    assert.deepEqual(
      task.nodeSelector,
      { "kubernetes.io/os": "linux", pool: "runs" },
      "run pods go where the workers are",
    );
    assert.equal(task.automountServiceAccountToken, false);
  });

  test("RBAC: the node worker may only read pods in its namespace; each run's job Secret is granted to it by name", () => {
    const all = objects();
    assert.equal(all.filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding").length, 0);
    const role = all.find((o) => o.kind === "Role" && o.metadata.name.endsWith("-worker"))!;
    assert.deepEqual(role.rules, [{ apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] }]);
    const controller = all.find((o) => o.kind === "Deployment")!.spec.template.spec.containers[0];
    assert.deepEqual(
      controller.env.find((e: any) => e.name === "DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT"),
      {
        name: "DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT",
        value: all.find((o) => o.kind === "DaemonSet")!.spec.template.spec.serviceAccountName,
      },
    );
  });
});

describe("agent-job specifics", () => {
  const objects = () => render("agent-job", ["--set", `agent.token=${token}`]);

  test("RBAC: a namespaced Role for the controller only; task pods get no API access", () => {
    const all = objects();
    assert.equal(all.filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding").length, 0);
    const role = all.find((o) => o.kind === "Role")!;
    const granted = new Set(role.rules!.flatMap((r: any) => r.resources));
    assert.deepEqual([...granted].sort(), [
      "agenttasks",
      "agenttasks/status",
      "events",
      "jobs",
      "leases",
      "pods",
      "secrets",
    ]);
    assert.ok(role.rules!.every((r: any) => !r.verbs.includes("*") && !r.resources.includes("*")));
    const binding = all.find((o) => o.kind === "RoleBinding")!;
    assert.deepEqual(
      binding.subjects!.map((s: any) => s.name),
      ["rel-agent-job-controller"],
    );
    const taskSa = all.find((o) => o.kind === "ServiceAccount" && o.metadata.name.endsWith("-task"))!;
    assert.equal(taskSa.automountServiceAccountToken, false);
    const task = all.find((o) => o.kind === "AgentTask")!;
    assert.equal(task.spec.jobTemplate.template.spec.serviceAccountName, "rel-agent-job-task");
    assert.equal(task.spec.jobTemplate.template.spec.automountServiceAccountToken, false);
    assert.equal(task.spec.jobTemplate.backoffLimit, 0);
  });

  test("proxy and CA bundle reach the controller, the worker and the runner", () => {
    const all = render("agent-job", [
      "--set",
      `agent.token=${token}`,
      "--set",
      "proxy.httpsProxy=http://proxy:3128",
      "--set",
      "proxy.noProxy=.svc",
      "--set-string",
      "agent.caBundle=-----BEGIN CERTIFICATE-----",
    ]);
    const controller = all.find((o) => o.kind === "Deployment")!.spec.template.spec;
    const env = (c: any) => Object.fromEntries(c.env.map((e: any) => [e.name, e.value]));
    assert.equal(env(controller.containers[0]).HTTPS_PROXY, "http://proxy:3128");
    assert.equal(env(controller.containers[0]).DROVER_CA_CERT, "/etc/drover/ca/ca.crt");
    assert.ok(controller.volumes.some((v: any) => v.name === "ca" && v.secret.secretName === "rel-agent-job-ca"));
    const task = all.find((o) => o.kind === "AgentTask")!.spec.jobTemplate.template.spec;
    const [worker, runner] = task.containers;
    assert.equal(env(worker).HTTPS_PROXY, "http://proxy:3128");
    assert.equal(env(worker).DROVER_CA_CERT, "/etc/drover/ca/ca.crt");
    assert.equal(env(runner).NO_PROXY, ".svc");
    assert.equal(env(runner).SSL_CERT_FILE, "/etc/drover/ca/ca.crt");
    const secret = all.find((o) => o.kind === "Secret" && o.metadata.name === "rel-agent-job-ca") as any;
    assert.match(secret.stringData["ca.crt"], /BEGIN CERTIFICATE/);
  });

  test("the CRD is a valid apiextensions.k8s.io/v1 CustomResourceDefinition with a schema", async () => {
    const { parse } = await import("yaml");
    const { readFileSync } = await import("node:fs");
    const crd = parse(readFileSync(join(repo, "charts", "agent-job", "crds", "agenttasks.drover.dev.yaml"), "utf8"));
    await validateObject(crd);
    assert.equal(crd.spec.names.shortNames[0], "atask");
    assert.deepEqual(crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.required, ["jobTemplate"]);
    assert.equal(
      readFileSync(join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"), "utf8"),
      readFileSync(join(repo, "charts", "agent-job", "crds", "agenttasks.drover.dev.yaml"), "utf8"),
      "the chart ships the CRD the tests use",
    );
  });
});

test("chart READMEs and schemas are generated from values.yaml and up to date", () => {
  const r = spawnSync(process.execPath, [join(repo, "scripts", "chart-docs.mjs"), "--check"], {
    cwd: repo,
    encoding: "utf8",
  });
  assert.equal(r.status, 0, r.stderr);
});

describe("drains and upgrades", () => {
  const pdbOf = (chart: string, args: string[]) =>
    render(chart, ["--set", `agent.token=${token}`, ...args]).find((o) => o.kind === "PodDisruptionBudget");

  test("PDBs default to maxUnavailable 1 and are left out when no pod could ever be evicted", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      assert.deepEqual(pdbOf(chart, [])?.spec.maxUnavailable, 1, chart);
      assert.equal(pdbOf(chart, [])?.spec.minAvailable, undefined, chart);
      assert.equal(
        pdbOf(chart, ["--set", "podDisruptionBudget.minAvailable=1"]),
        undefined,
        `${chart}: minAvailable 1 of one replica blocks every drain`,
      );
      assert.equal(
        pdbOf(chart, ["--set-string", "podDisruptionBudget.minAvailable=50%"]),
        undefined,
        `${chart}: 50% of one replica rounds up to 1`,
      );
      assert.equal(pdbOf(chart, ["--set", "podDisruptionBudget.maxUnavailable=0"]), undefined, chart);
      assert.equal(pdbOf(chart, ["--set", "podDisruptionBudget.enabled=false"]), undefined, chart);
      assert.equal(
        pdbOf(chart, ["--set-string", "podDisruptionBudget.maxUnavailable=50%"])?.spec.maxUnavailable,
        "50%",
        chart,
      );
    }
    assert.equal(
      pdbOf("agent-local", ["--set", "replicaCount=4", "--set-string", "podDisruptionBudget.minAvailable=50%"])?.spec
        .minAvailable,
      "50%",
    );
    assert.equal(
      pdbOf("agent-local", ["--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=2"])?.spec
        .minAvailable,
      2,
    );
    assert.match(
      renderFails("agent-job", [
        "--set",
        `agent.token=${token}`,
        "--set-string",
        "podDisruptionBudget.minAvailable=half",
      ]),
      /minAvailable/,
    );
  });

  test("helm upgrade with a new token or CA bundle changes the pod templates (pods restart); the same values do not", () => {
    const annotations = (chart: string, args: string[], fresh = false) =>
      Object.fromEntries(
        render(chart, args, { fresh })
          .filter((o) => o.kind === "Deployment" || o.kind === "DaemonSet")
          .map((o) => [o.kind, o.spec.template.metadata.annotations]),
      );
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      const a = annotations(chart, ["--set", `agent.token=${token}`]);
      assert.deepEqual(
        annotations(chart, ["--set", `agent.token=${token}`], true),
        a,
        `${chart}: stable (a second render, not the first one again)`,
      );
      assert.notDeepEqual(
        annotations(chart, ["--set", `agent.token=${token}x`]).Deployment,
        a.Deployment,
        `${chart}: a new token restarts the agent/controller`,
      );
      assert.notDeepEqual(
        annotations(chart, [
          "--set",
          `agent.token=${token}`,
          "--set-string",
          "agent.caBundle=-----BEGIN CERTIFICATE-----",
        ]).Deployment,
        a.Deployment,
        `${chart}: a new CA restarts it`,
      );
      const existing = (name: string) =>
        annotations(chart, ["--set", `agent.tokenExistingSecret.name=${name}`]).Deployment;
      assert.notDeepEqual(existing("one"), existing("two"), `${chart}: pointing at another Secret restarts it`);
    }
  });

  test("agent-k8s: per-node workers are replaced OnDelete (an upgrade never restarts a worker under runs); hostPath type Directory", () => {
    const ds = render("agent-k8s", ["--set", `agent.token=${token}`]).find((o) => o.kind === "DaemonSet")!;
    assert.deepEqual(ds.spec.updateStrategy, { type: "OnDelete" });
    assert.equal(ds.spec.template.spec.volumes.find((v: any) => v.name === "home").hostPath.type, "Directory");
    assert.equal(ds.spec.template.spec.initContainers, undefined);
    const prepared = render("agent-k8s", [
      "--set",
      `agent.token=${token}`,
      "--set",
      "workerDaemonSet.prepareDataHome=true",
    ]).find((o) => o.kind === "DaemonSet")!.spec.template.spec;
    assert.equal(prepared.volumes.find((v: any) => v.name === "home").hostPath.type, "DirectoryOrCreate");
    const init = prepared.initContainers.find((c: any) => c.name === "prepare-data-home");
    // ready/ too: a run pod that reached the node first has its kubelet create it root-owned.
    assert.match(
      init.command[2],
      /chown 1000:1000 "\/var\/lib\/drover-agent" "\/var\/lib\/drover-agent"\/runs "\/var\/lib\/drover-agent"\/ready && chmod 0711/,
    );
    assert.deepEqual(init.securityContext.capabilities, { drop: ["ALL"], add: ["CHOWN", "FOWNER"] });
  });
});

describe("values at the edges", () => {
  test('storageClassName "-" asks for no storage class (""); a name is kept', () => {
    for (const [chart, extra] of [
      ["agent-local", []],
      ["agent-job", []],
      ["agent-k8s", ["--set", "jobWorker=true"]],
    ] as const) {
      // The job charts keep the seed charts' persistence.cache.* names.
      const p = chart === "agent-local" ? "persistence" : "persistence.cache";
      const claim = (sc: string) =>
        render(chart, [
          "--set",
          `agent.token=${token}`,
          ...extra,
          "--set",
          `${p}.enabled=true`,
          "--set-string",
          `${p}.persistentVolumeClaim.storageClassName=${sc}`,
        ]).find((o) => o.kind === "PersistentVolumeClaim")!;
      assert.equal(claim("-").spec.storageClassName, "", chart);
      assert.equal(claim("fast").spec.storageClassName, "fast", chart);
    }
  });

  test("healthPort 0 renders no port, probe, metrics Service or ServiceMonitor", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      const all = render(chart, [
        "--set",
        `agent.token=${token}`,
        "--set",
        "agent.healthPort=0",
        "--set",
        "serviceMonitor.enabled=true",
      ]);
      assert.ok(!JSON.stringify(all).includes('"containerPort":0'), chart);
      assert.equal(all.filter((o) => o.kind === "Service" || o.kind === "ServiceMonitor").length, 0, chart);
      for (const { spec } of podSpecs(all))
        for (const c of spec.containers) assert.equal(c.livenessProbe, undefined, chart);
    }
  });

  test("a chosen seccomp profile replaces RuntimeDefault instead of adding a second key", () => {
    const all = render("agent-local", ["-f", join(repo, "charts/agent-local/ci/edge-values.yaml")]);
    const agent = all.find((o) => o.kind === "Deployment")!.spec.template.spec.containers[0];
    assert.deepEqual(agent.securityContext.seccompProfile, {
      type: "Localhost",
      localhostProfile: "profiles/drover.json",
    });
  });

  test("extraEnv naming a variable the chart sets is refused, so no container gets a name twice", async () => {
    // Which values map feeds which container.
    const feeds: Record<string, string> = {
      agent: "extraEnv",
      controller: "extraEnv",
      worker: "task.worker.extraEnv",
      runner: "task.runner.extraEnv",
    };
    for (const [chart, extra] of [
      ["agent-local", []],
      ["agent-job", []],
      ["agent-k8s", []],
      ["agent-k8s", ["--set", "jobWorker=true"]],
    ] as const) {
      const base = [
        "--set",
        `agent.token=${token}`,
        "--set-string",
        "agent.caBundle=x",
        "--set",
        "proxy.httpsProxy=http://p",
        "--set",
        "proxy.httpProxy=http://p",
        "--set",
        "proxy.noProxy=.svc",
        ...(chart === "agent-local" ? [] : ["--set", "otel.endpoint=http://o"]),
        ...extra,
      ];
      // Every variable each container gets, by the values map that feeds it. The chart names every clash in one
      // refusal, so one render per map finds the refused ones and a second, of all the others, must render with no
      // container holding a name twice.
      const names = new Map<string, Set<string>>();
      for (const { owner, spec } of podSpecs(render(chart, base))) {
        for (const c of spec.containers) {
          const field = owner.startsWith("DaemonSet") ? "extraEnv" : feeds[c.name];
          if (!field) continue;
          if (!names.has(field)) names.set(field, new Set());
          for (const { name } of c.env ?? []) names.get(field)!.add(name);
        }
      }
      const fields = [...names.keys()];
      assert.ok(fields.length > 0, `${chart}: no variables to try`);
      const setting = (field: string, some: Iterable<string>) =>
        [...some].flatMap((name) => ["--set", `${field}.${name}=dup`]);
      const all = await renderEach(
        chart,
        fields.map((field) => [...base, ...setting(field, names.get(field)!)]),
      );
      const accepted = fields.map((field, i) => {
        const r = all[i]!;
        if (r.status === 0) return [...names.get(field)!];
        // Each refused variable is named after a separator (a task map's own message must not count for extraEnv).
        const refused = (name: string) =>
          new RegExp(`(^|[\\s;:])${field.replace(/\./g, "\\.")}\\.${name} is set by the chart`).test(r.stderr);
        assert.ok(
          [...names.get(field)!].some(refused),
          `${chart} ${field}: the render failed without naming a variable the chart sets:\n${r.stderr}`,
        );
        return [...names.get(field)!].filter((name) => !refused(name));
      });
      const rest = await renderEach(
        chart,
        fields.map((field, i) => [...base, ...setting(field, accepted[i]!)]),
      );
      for (const [i, field] of fields.entries()) {
        const r = rest[i]!;
        assert.equal(
          r.status,
          0,
          `${chart} ${field}: ${accepted[i]!.join(", ")} set at once should render:\n${r.stderr}`,
        );
        const again: K[] = parseAllDocuments(r.stdout)
          .map((d) => d.toJSON() as K | null)
          .filter((o): o is K => o !== null);
        for (const p of podSpecs(again))
          for (const c2 of p.spec.containers as any[]) {
            const envNames: string[] = (c2.env ?? []).map((e: any) => e.name);
            assert.equal(
              new Set(envNames).size,
              envNames.length,
              `${chart} ${p.owner} ${c2.name}: one of ${field}.{${accepted[i]!.join(",")}} duplicated an env entry`,
            );
          }
      }
    }
  });
});

describe("chart-docs.mjs", () => {
  test("documents the first key of every nested map", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      const readme = readFileSync(join(repo, "charts", chart, "README.md"), "utf8");
      for (const key of ["image.repository", "agent.url", "securityContext.runAsUser", "podDisruptionBudget.enabled"])
        assert.match(readme, new RegExp(`^\\| ${key.replace(/\./g, "\\.")} \\|`, "m"), `${chart}: ${key}`);
    }
  });

  test("--check fails, naming it, on a value without a description", () => {
    const dir = mkdtempSync(join(tmpdir(), "chart-docs-"));
    try {
      mkdirSync(join(dir, "charts", "c"), { recursive: true });
      writeFileSync(join(dir, "charts", "c", "values.yaml"), "a:\n  first: 1\n  # -- Second.\n  second: 2\n");
      writeFileSync(join(dir, "charts", "c", "README.md"), "# c\n\n<!-- values:start -->\n<!-- values:end -->\n");
      const r = spawnSync(process.execPath, [join(repo, "scripts", "chart-docs.mjs"), "--check"], {
        cwd: dir,
        encoding: "utf8",
      });
      assert.equal(r.status, 1);
      assert.match(r.stderr, /no "# --" description for a\.first/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("agent-local: agent.providerCache and agent.moduleCache map onto the agent's provider cache settings (sizes in Mi/Gi/Ti to MiB); a bad size fails the render with the key", () => {
  const env = (args: string[]): Record<string, string> => {
    // On a claim: the limits pass as set (on the cache's emptyDir they are scaled to fit it; cache-values.test.ts).
    const deployment = render("agent-local", [
      "--set",
      `agent.token=${token}`,
      "--set",
      "persistence.enabled=true",
      ...args,
    ]).find((o) => o.kind === "Deployment")!;
    const agent = deployment.spec.template.spec.containers[0] as { env: Array<{ name: string; value?: string }> };
    return Object.fromEntries(agent.env.map((e) => [e.name, e.value ?? ""]));
  };
  const defaults = env([]);
  assert.equal(defaults.DROVER_AGENT_PROVIDER_CACHE_ENABLED, "true");
  assert.equal(defaults.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, String(16 * 1024));
  const set = env(["--set", "agent.providerCache.enabled=false", "--set", "agent.providerCache.sizeLimit=1Ti"]);
  assert.equal(set.DROVER_AGENT_PROVIDER_CACHE_ENABLED, "false");
  assert.equal(set.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, String(1024 * 1024));
  assert.equal(env(["--set", "agent.providerCache.sizeLimit=512Mi"]).DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, "512");
  assert.match(
    renderFails("agent-local", ["--set", `agent.token=${token}`, "--set", "agent.providerCache.sizeLimit=40GB"]),
    /sizeLimit/,
  );
  assert.equal(defaults.DROVER_AGENT_MODULE_CACHE_ENABLED, "false");
  assert.equal(defaults.DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB, "2048");
  const modules = env(["--set", "agent.moduleCache.enabled=true", "--set", "agent.moduleCache.sizeLimit=3Gi"]);
  assert.equal(modules.DROVER_AGENT_MODULE_CACHE_ENABLED, "true");
  assert.equal(modules.DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB, "3072");
});

test("agent-local: agent.engines and agent.binaryCache map onto the agent's engine settings, which the agent accepts as rendered", async () => {
  const { loadAgentConfig } = await import("@drover/agent");
  const env = (args: string[]): Record<string, string> => {
    const deployment = render("agent-local", [
      "--set",
      `agent.token=${token}`,
      "--set",
      "persistence.enabled=true",
      ...args,
    ]).find((o) => o.kind === "Deployment")!;
    const agent = deployment.spec.template.spec.containers[0] as { env: Array<{ name: string; value?: string }> };
    return Object.fromEntries(agent.env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value ?? ""]));
  };
  const defaults = env([]);
  assert.equal(defaults.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB, String(5 * 1024));
  assert.equal(defaults.DROVER_AGENT_ENGINE_PATH_FALLBACK, "true");
  for (const unset of [
    "DROVER_AGENT_TERRAFORM_RELEASES_URL",
    "DROVER_AGENT_TOFU_RELEASES_URL",
    "DROVER_AGENT_TOFU_VERSIONS_URL",
    "DROVER_AGENT_ENGINE_SIGNING_KEYS",
    "DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS",
  ]) {
    assert.equal(defaults[unset], undefined, `${unset} is left to the agent's default`);
  }
  const keys = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQENBF...\n-----END PGP PUBLIC KEY BLOCK-----\n";
  const dir = mkdtempSync(join(tmpdir(), "drover-chart-keys-"));
  const keysFile = join(dir, "keys.asc");
  writeFileSync(keysFile, keys);
  const set = env([
    "--set",
    "agent.binaryCache.sizeLimit=20Gi",
    "--set",
    "agent.engines.pathFallback=false",
    "--set",
    "agent.engines.terraformReleasesUrl=https://mirror.example/terraform",
    "--set",
    "agent.engines.tofuReleasesUrl=https://mirror.example/tofu",
    "--set",
    "agent.engines.tofuVersionsUrl=https://mirror.example/tofu/api.json",
    "--set-file",
    `agent.engines.signingKeys=${keysFile}`,
    "--set",
    "agent.engines.trustedFingerprints=E3E6E43D84CB852EADB0051D0C0AF313E5FD9F80",
  ]);
  rmSync(dir, { recursive: true, force: true });
  const engines = loadAgentConfig({ ...set, DROVER_TOKEN: token }).engines;
  assert.deepEqual(engines, {
    terraformReleasesUrl: "https://mirror.example/terraform",
    tofuReleasesUrl: "https://mirror.example/tofu",
    tofuVersionsUrl: "https://mirror.example/tofu/api.json",
    signingKeys: keys,
    trustedFingerprints: ["E3E6E43D84CB852EADB0051D0C0AF313E5FD9F80"],
    pathFallback: false,
  });
  assert.equal(set.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB, String(20 * 1024));
  assert.match(
    renderFails("agent-local", ["--set", `agent.token=${token}`, "--set", "agent.binaryCache.sizeLimit=5GB"]),
    /sizeLimit/,
  );
});

describe("what a real cluster refuses or needs (review kubernetes-2026-11-28)", () => {
  const base = ["--set", `agent.token=${token}`];
  const one = (objects: K[], kind: string) => objects.find((o) => o.kind === kind)!;

  test("B2: networkPolicy.flavor cilium renders a CiliumNetworkPolicy: every entity (API server included) but the metadata addresses", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      const all = render(chart, [...base, "--set", "networkPolicy.flavor=cilium"]);
      assert.equal(all.filter((o) => o.kind === "NetworkPolicy").length, 0, chart);
      const policy = one(all, "CiliumNetworkPolicy");
      assert.equal(policy.apiVersion, "cilium.io/v2");
      assert.deepEqual(policy.spec.egress, [{ toEntities: ["world", "cluster"] }], chart);
      assert.deepEqual(policy.spec.egressDeny, [{ toCIDR: [...metadataV4, ...metadataV6] }], chart);
      const pods = podSpecs(all).filter((p) =>
        chart === "agent-local" ? p.owner.startsWith("Deployment") : p.owner.startsWith("AgentTask"),
      );
      const labels =
        chart === "agent-local"
          ? one(all, "Deployment").spec.template.metadata.labels
          : one(all, "AgentTask").spec.jobTemplate.template.metadata.labels;
      assert.ok(pods.length > 0);
      for (const [k, v] of Object.entries(policy.spec.endpointSelector.matchLabels))
        assert.equal(labels[k], v, `${chart}: selects its pods by ${k}`);
      assert.match(renderFails(chart, [...base, "--set", "networkPolicy.flavor=calico"]), /flavor/);
    }
  });

  test("B4, I10: resources take any resource name and numbers, quantities are checked, strategy takes integers", async () => {
    const sets = {
      "agent-local": [
        "resources.requests.cpu=2",
        "resources.limits.nvidia\\.com/gpu=1",
        "busyPodProtection.enabled=true",
        "busyPodProtection.resources.limits.cpu=0.5",
        "strategy.rollingUpdate.maxSurge=1",
        "strategy.rollingUpdate.maxUnavailable=0",
      ],
      "agent-job": [
        "task.runner.resources.limits.cpu=4",
        "task.worker.resources.limits.cpu=2",
        "task.init.resources.limits.cpu=100m",
        "resources.limits.cpu=1",
        "resources.requests.cpu=0.25",
      ],
      "agent-k8s": [
        "task.runner.resources.limits.cpu=4",
        "workerDaemonSet.resources.limits.cpu=1",
        "resources.requests.memory=134217728",
      ],
    };
    for (const [chart, values] of Object.entries(sets)) {
      const all = render(chart, [...base, ...values.flatMap((v) => ["--set", v])]);
      for (const o of all) await validateObject(o);
      const containers = podSpecs(all).flatMap((p) => [...p.spec.containers, ...(p.spec.initContainers ?? [])]);
      assert.ok(
        containers.some((c: any) => c.resources?.limits?.cpu !== undefined),
        `${chart}: a CPU limit`,
      );
      assert.match(
        renderFails(chart, [...base, "--set", "resources.limits.cpu=lots"]),
        /resources\/limits\/cpu/,
        chart,
      );
      assert.match(renderFails(chart, [...base, "--set", "resources.limit.cpu=1"]), /'limit' not allowed/, chart);
    }
    const strategy = one(
      render("agent-local", [...base, ...sets["agent-local"].flatMap((v) => ["--set", v])]),
      "Deployment",
    ).spec.strategy;
    assert.deepEqual(strategy.rollingUpdate, { maxSurge: 1, maxUnavailable: 0 });
  });

  test("I10: a pod-level Localhost seccomp profile, an emptyDir medium and an image digest pass through", () => {
    const digest = "sha256:" + "a".repeat(64);
    const all = render("agent-local", [
      ...base,
      "--set",
      "podSecurityContext.seccompProfile.type=Localhost",
      "--set",
      "podSecurityContext.seccompProfile.localhostProfile=drover.json",
      "--set",
      "persistence.data.emptyDir.medium=Memory",
      "--set",
      `image.digest=${digest}`,
    ]);
    const spec = one(all, "Deployment").spec.template.spec;
    assert.deepEqual(spec.securityContext.seccompProfile, { type: "Localhost", localhostProfile: "drover.json" });
    assert.deepEqual(spec.volumes.find((v: any) => v.name === "data").emptyDir, { sizeLimit: "4Gi", medium: "Memory" });
    assert.equal(spec.containers[0].image, `ghcr.io/drover-dev/drover@${digest}`);
    const task = one(render("agent-job", [...base, "--set", "persistence.cache.emptyDir.medium=Memory"]), "AgentTask")
      .spec.jobTemplate.template.spec;
    assert.deepEqual(task.volumes.find((v: any) => v.name === "drover-cache").emptyDir, {
      sizeLimit: "1Gi",
      medium: "Memory",
    });
  });

  test("B5: agent-local strategy Recreate renders without rollingUpdate", async () => {
    const deployment = one(render("agent-local", [...base, "--set", "strategy.type=Recreate"]), "Deployment");
    assert.deepEqual(deployment.spec.strategy, { type: "Recreate" });
    await validateObject(deployment);
  });

  test("B6: agent-local persistence on a ReadWriteOnce claim updates by Recreate and refuses a second pod; ReadWriteMany keeps RollingUpdate", () => {
    const p = ["--set", "persistence.enabled=true"];
    assert.deepEqual(one(render("agent-local", [...base, ...p]), "Deployment").spec.strategy, { type: "Recreate" });
    for (const more of [
      ["--set", "replicaCount=2"],
      ["--set", "autoscaling.keda.enabled=true", "--set", "agent.url=https://d.example"],
    ]) {
      assert.match(
        renderFails("agent-local", [...base, ...p, ...more]),
        /persistence on a ReadWriteOnce claim can be mounted by one pod only, but up to (2|10) agent pods/,
      );
    }
    const rwx = one(
      render("agent-local", [
        ...base,
        ...p,
        "--set",
        "persistence.persistentVolumeClaim.accessMode=ReadWriteMany",
        "--set",
        "replicaCount=3",
      ]),
      "Deployment",
    );
    assert.equal(rwx.spec.strategy.type, "RollingUpdate");
  });

  test("B10: agent charts render as subcharts of an umbrella chart that sets its own globals", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      assert.doesNotThrow(
        () =>
          render(chart, [...base, "--set", "global.storageClass=fast", "--set", "global.imagePullSecrets[0].name=x"]),
        chart,
      );
    }
  });

  test("U3: busyPodProtection never binds its pod-patching Role to the namespace's default ServiceAccount", () => {
    const on = [...base, "--set", "busyPodProtection.enabled=true"];
    for (const sa of [
      ["--set", "serviceAccount.create=false"],
      ["--set", "serviceAccount.create=false", "--set", "serviceAccount.name=default"],
    ]) {
      assert.match(
        renderFails("agent-local", [...on, ...sa]),
        /busyPodProtection binds a Role that patches pods to the agent's ServiceAccount/,
      );
    }
    const binding = render("agent-local", [
      ...on,
      "--set",
      "serviceAccount.create=false",
      "--set",
      "serviceAccount.name=drover-agents",
    ]).find((o) => o.kind === "RoleBinding")!;
    assert.deepEqual(
      binding.subjects!.map((s: any) => s.name),
      ["drover-agents"],
    );
  });

  test("U5: the pod-annotator's token expires after an hour (3607 would be extended to a year)", () => {
    const spec = one(render("agent-local", [...base, "--set", "busyPodProtection.enabled=true"]), "Deployment").spec
      .template.spec;
    const token = spec.volumes.find((v: any) => v.name === "pod-annotator-token").projected.sources[0]
      .serviceAccountToken;
    assert.equal(token.expirationSeconds, 3600);
  });

  test("I13: per-node workers and agent-job's task pods go to Linux nodes by default", () => {
    assert.deepEqual(one(render("agent-k8s", base), "DaemonSet").spec.template.spec.nodeSelector, {
      "kubernetes.io/os": "linux",
    });
    assert.deepEqual(one(render("agent-job", base), "AgentTask").spec.jobTemplate.template.spec.nodeSelector, {
      "kubernetes.io/os": "linux",
    });
  });
});

describe("integrations (review kubernetes-2026-11-28)", () => {
  const base = ["--set", `agent.token=${token}`];
  const one = (objects: K[], kind: string) => objects.find((o) => o.kind === kind)!;

  test("I8: ServiceMonitors carry labels, a scrape timeout and relabelings; agent-k8s's node workers get a PodMonitor", () => {
    const monitoring = [
      ...base,
      "--set",
      "serviceMonitor.enabled=true",
      "--set",
      "serviceMonitor.labels.release=kps",
      "--set",
      "serviceMonitor.scrapeTimeout=10s",
      "--set",
      "serviceMonitor.relabelings[0].targetLabel=pool",
      "--set",
      "serviceMonitor.relabelings[0].replacement=p",
    ];
    const endpoint = {
      port: "health",
      path: "/metrics",
      interval: "30s",
      scrapeTimeout: "10s",
      relabelings: [{ targetLabel: "pool", replacement: "p" }],
    };
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      const all = render(chart, monitoring);
      const monitor = one(all, "ServiceMonitor") as any;
      assert.equal(monitor.metadata.labels.release, "kps", chart);
      assert.deepEqual(monitor.spec.endpoints, [endpoint], chart);
    }
    const pod = one(render("agent-k8s", monitoring), "PodMonitor") as any;
    assert.equal(pod.metadata.labels.release, "kps");
    assert.deepEqual(pod.spec.podMetricsEndpoints, [endpoint]);
    const ds = one(render("agent-k8s", monitoring), "DaemonSet");
    for (const [k, v] of Object.entries(pod.spec.selector.matchLabels))
      assert.equal(ds.spec.template.metadata.labels[k], v, k);
    assert.ok(ds.spec.template.spec.containers[0].ports.some((p: any) => p.name === "health"));
    assert.equal(
      render("agent-k8s", [...monitoring, "--set", "jobWorker=true"]).filter((o) => o.kind === "PodMonitor").length,
      0,
    );
  });

  test("I9: rbac.create false leaves the Roles to the user; rbac.aggregateClusterRoles aggregates agenttasks into admin, edit and view", async () => {
    for (const chart of ["agent-job", "agent-k8s"]) {
      const kinds = (args: string[]) => render(chart, [...base, ...args]).map((o) => o.kind);
      assert.ok(kinds([]).includes("Role") && !kinds([]).includes("ClusterRole"), chart);
      assert.deepEqual(
        kinds(["--set", "rbac.create=false"]).filter((k) => k === "Role" || k === "RoleBinding"),
        [],
        chart,
      );
      const roles = render(chart, [...base, "--set", "rbac.aggregateClusterRoles=true"]).filter(
        (o) => o.kind === "ClusterRole",
      );
      for (const r of roles) await validateObject(r);
      const byRole = Object.fromEntries(
        roles.map((r: any) => [
          Object.keys(r.metadata.labels)
            .find((l) => l.startsWith("rbac.authorization.k8s.io/aggregate-to-"))!
            .split("-")
            .pop(),
          r.rules,
        ]),
      );
      assert.deepEqual(Object.keys(byRole).sort(), ["admin", "edit", "view"], chart);
      assert.deepEqual(byRole.view, [
        { apiGroups: ["drover.dev"], resources: ["agenttasks"], verbs: ["get", "list", "watch"] },
      ]);
      // An admin must hold every verb the controller's Role grants on agenttasks to create that Role.
      const controllerVerbs = one(render(chart, base), "Role")
        .rules!.filter((r: any) => r.resources.includes("agenttasks"))
        .flatMap((r: any) => r.verbs);
      for (const v of controllerVerbs) assert.ok(byRole.admin[0].verbs.includes(v), `${chart}: admin lacks ${v}`);
    }
  });

  test("I15: KEDA's TriggerAuthentication carries the server's CA bundle", () => {
    const keda = [...base, "--set", "agent.url=https://d.example", "--set", "autoscaling.keda.enabled=true"];
    const auth = (args: string[]) =>
      one(render("agent-local", [...keda, ...args]), "TriggerAuthentication").spec.secretTargetRef;
    assert.deepEqual(
      auth([]).map((r: any) => r.parameter),
      ["token"],
    );
    assert.deepEqual(auth(["--set-string", "agent.caBundle=-----BEGIN CERTIFICATE-----"])[1], {
      parameter: "ca",
      name: "rel-agent-local-ca",
      key: "ca.crt",
    });
    assert.deepEqual(
      auth(["--set", "agent.caBundleSecret.name=corp-ca", "--set", "agent.caBundleSecret.key=bundle.pem"])[1],
      { parameter: "ca", name: "corp-ca", key: "bundle.pem" },
    );
  });

  test("I16: every chart declares the Kubernetes versions it needs, and helm refuses older ones", () => {
    for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
      assert.match(
        readFileSync(join(repo, "charts", chart, "Chart.yaml"), "utf8"),
        /^kubeVersion: ">=1\.29\.0-0"$/m,
        chart,
      );
      assert.match(renderFails(chart, [...base, "--kube-version", "1.28.0"]), /kubeVersion/, chart);
    }
  });

  test("I17: task.podDisruptionBudget makes drains wait for run pods, never for a failed one", async () => {
    for (const chart of ["agent-job", "agent-k8s"]) {
      assert.equal(
        render(chart, base).filter((o) => o.kind === "PodDisruptionBudget" && o.metadata.name.endsWith("-task")).length,
        0,
        `${chart}: opt-in`,
      );
      const all = render(chart, [...base, "--set", "task.podDisruptionBudget.enabled=true"]);
      const pdb = all.find((o) => o.kind === "PodDisruptionBudget" && o.metadata.name.endsWith("-task"))!;
      await validateObject(pdb);
      assert.equal(pdb.spec.maxUnavailable, 0);
      assert.equal(pdb.spec.unhealthyPodEvictionPolicy, "AlwaysAllow");
      const labels = one(all, "AgentTask").spec.jobTemplate.template.metadata.labels;
      for (const [k, v] of Object.entries(pdb.spec.selector.matchLabels))
        assert.equal(labels[k], v, `${chart}: selects run pods by ${k}`);
    }
  });
});

test("B8: each README's OpenShift command renders pods with no fixed UID, GID or fsGroup, still non-root", () => {
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    const readme = readFileSync(join(repo, "charts", chart, "README.md"), "utf8");
    const block = /## OpenShift\n[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(block, `${chart}: no OpenShift section with a command`);
    const sets = [...block.matchAll(/--set ([^\s\\]+)/g)]
      .map((m) => m[1]!)
      .filter((v) => !v.startsWith("agent.tokenExistingSecret"));
    assert.ok(sets.length >= 3, chart);
    const args = [
      "--set",
      `agent.token=${token}`,
      ...sets.flatMap((v) => ["--set", v]),
      ...(chart === "agent-k8s" ? ["--set", "jobWorker=true"] : []),
    ];
    for (const { owner, spec } of podSpecs(render(chart, args))) {
      assert.equal(spec.securityContext.fsGroup, undefined, owner);
      assert.equal(spec.securityContext.runAsNonRoot, true, owner);
      for (const c of [...spec.containers, ...(spec.initContainers ?? [])].filter(
        (c: any) => c.name !== "log-shipper",
      )) {
        assert.equal(c.securityContext.runAsUser, undefined, `${owner} ${c.name}`);
        assert.equal(c.securityContext.runAsGroup, undefined, `${owner} ${c.name}`);
      }
    }
  }
});

test("every key of each chart's values.yaml has a row in its README values table", () => {
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    const values = parseAllDocuments(
      readFileSync(join(repo, "charts", chart, "values.yaml"), "utf8"),
    )[0]!.toJSON() as Record<string, unknown>;
    const readme = readFileSync(join(repo, "charts", chart, "README.md"), "utf8");
    const rows = new Set([...readme.matchAll(/^\| ([^ |]+) \| /gm)].map((m) => m[1]!));
    // A leaf: a scalar, a list, an empty map, or a map whose keys are the user's (a node selector with a default).
    const userKeys = /(^|\.)(nodeSelector|annotations|labels|podAnnotations|podLabels|extraEnv)$/;
    const leaves = (o: Record<string, unknown>, path: string): string[] =>
      Object.entries(o).flatMap(([k, v]) => {
        const key = path ? `${path}.${k}` : k;
        const map = v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length > 0;
        return map && !userKeys.test(key) ? leaves(v as Record<string, unknown>, key) : [key];
      });
    assert.deepEqual(
      leaves(values, "").filter((k) => !rows.has(k)),
      [],
      chart,
    );
  }
});

test("agent-local mode vcs: `agent vcs` with the connections file from its Secret, the webhook listener behind a Service, none of a run agent's settings; no Secret fails the render", () => {
  const objects = render("agent-local", ["-f", join(repo, "charts", "agent-local", "ci", "vcs-values.yaml")]);
  const pod = objects.find((o) => o.kind === "Deployment")!.spec.template.spec;
  const agent = pod.containers[0] as {
    args: string[];
    env: Array<{ name: string; value?: string }>;
    ports: Array<{ name: string; containerPort: number }>;
    volumeMounts: Array<{ name: string; mountPath: string }>;
  };
  assert.deepEqual(agent.args, ["agent", "vcs"]);
  const env = Object.fromEntries(agent.env.map((e) => [e.name, e.value ?? ""]));
  assert.equal(env.DROVER_AGENT_VCS_CONNECTIONS_FILE, "/etc/drover/vcs/connections.json");
  assert.equal(env.DROVER_AGENT_VCS_CONCURRENCY, "4");
  assert.equal(env.DROVER_AGENT_VCS_WEBHOOK_PORT, "8090");
  assert.equal(env.DROVER_AGENT_DRIVER, undefined, "a VCS agent runs no jobs");
  // The VCS agent refuses the run agent's settings: the chart gives it none.
  for (const name of [
    "DROVER_AGENT_WORKER_ON_STOP_ACTION",
    "DROVER_AGENT_CACHE_DIR",
    "DROVER_AGENT_PROVIDER_CACHE_ENABLED",
  ])
    assert.equal(env[name], undefined, name);
  assert.equal(env.DROVER_AGENT_GRACE_PERIOD_SECONDS, "120");
  assert.ok(agent.volumeMounts.some((m) => m.name === "vcs-connections" && m.mountPath === "/etc/drover/vcs"));
  const volume = (pod.volumes as Array<{ name: string; secret?: { secretName: string; items?: unknown } }>).find(
    (v) => v.name === "vcs-connections",
  );
  assert.equal(volume?.secret?.secretName, "vcs-connections");
  assert.equal(volume?.secret?.items, undefined, "every key mounted: a GitHub App's key file beside the connections");
  assert.deepEqual(
    agent.ports.find((p) => p.name === "webhooks"),
    { name: "webhooks", containerPort: 8090 },
  );
  const service = objects.find((o) => o.kind === "Service" && o.metadata.name.endsWith("-webhooks"));
  assert.equal(service?.spec.ports[0].targetPort, "webhooks");
  // The default stays a run agent, with no webhook Service.
  const runs = render("agent-local", ["--set", `agent.token=${token}`]);
  assert.deepEqual(runs.find((o) => o.kind === "Deployment")!.spec.template.spec.containers[0].args, ["agent", "run"]);
  assert.ok(!runs.some((o) => o.kind === "Service" && o.metadata.name.endsWith("-webhooks")));
  assert.match(
    renderFails("agent-local", ["--set", `agent.token=${token}`, "--set", "mode=vcs"]),
    /mode vcs needs vcs.connectionsSecret.name/,
  );
  assert.match(renderFails("agent-local", ["--set", `agent.token=${token}`, "--set", "mode=relay"]), /mode/);
  // Values of a run agent that a VCS agent would refuse fail the render, naming what it does instead.
  const vcs = [
    "-f",
    join(repo, "charts", "agent-local", "ci", "vcs-values.yaml"),
    "--set",
    "serviceAccount.create=true",
  ];
  assert.match(renderFails("agent-local", [...vcs, "--set", "agent.concurrency=2"]), /runs vcs.concurrency tasks/);
  assert.match(
    renderFails("agent-local", [...vcs, "--set", "agent.shutdownMode=drain"]),
    /terminationGracePeriodSeconds/,
  );
  assert.match(renderFails("agent-local", [...vcs, "--set", "busyPodProtection.enabled=true"]), /keeps no count/);
});
