import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import * as pulumi from "@pulumi/pulumi";

// The component under Pulumi's mocks: the resources it would create, with their inputs.

interface Created {
  type: string;
  name: string;
  inputs: Record<string, any>;
}
let created: Created[] = [];
const secretSignatureKey = "4dabf18193072939515e22adb298388d";
const secretSignature = "1b47061264138c4ac30d75fd1eb44270";

before(async () => {
  await pulumi.runtime.setMocks(
    {
      newResource: (args) => {
        created.push({ type: args.type, name: args.name, inputs: args.inputs });
        return { id: `${args.name}-id`, state: args.inputs };
      },
      call: (args) => args.inputs,
    },
    "drover",
    "test",
    false,
  );
});

/** Creates the component and waits until every child resource was registered. */
async function install(args: Record<string, unknown>, opts?: pulumi.ComponentResourceOptions) {
  created = [];
  const { DroverAgent } = await import("../src/index.js");
  const agent = new DroverAgent("drv", { namespace: "drover", token: "drv_p_abc.secret", ...args } as any, opts);
  await new Promise<void>((resolve) =>
    pulumi.all([agent.deployment.id, agent.service.id, agent.tokenSecret?.id ?? ""]).apply(() => resolve()),
  );
  await new Promise((r) => setTimeout(r, 50));
  return agent;
}
const byType = (type: string) => created.filter((c) => c.type === type);
const one = (type: string) => {
  const found = byType(type);
  assert.equal(found.length, 1, `${type}: ${found.length}`);
  return found[0]!;
};

describe("DroverAgent (Pulumi mocks)", () => {
  test("local mode: namespace, token secret, service account, deployment, metrics service", async () => {
    await install({ mode: "local", replicas: 3, url: "https://drover.example.com", env: { FOO: "bar" } });
    assert.equal(one("kubernetes:core/v1:Namespace").inputs.metadata.name, "drover");
    const deploy = one("kubernetes:apps/v1:Deployment").inputs;
    assert.equal(deploy.spec.replicas, 3);
    const container = deploy.spec.template.spec.containers[0];
    assert.deepEqual(container.args, ["agent", "run"]);
    const env = Object.fromEntries(container.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    assert.equal(env.DROVER_URL, "https://drover.example.com");
    assert.equal(env.DROVER_AGENT_DRIVER, "local");
    assert.equal(env.FOO, "bar");
    assert.equal(
      env.DROVER_TOKEN.secretKeyRef.key,
      "token",
      "the token reaches the pod only through a Secret reference",
    );
    assert.equal(container.securityContext.runAsUser, 1000);
    assert.equal(container.securityContext.readOnlyRootFilesystem, true);
    assert.deepEqual(container.securityContext.capabilities.drop, ["ALL"]);
    assert.ok(one("kubernetes:core/v1:Service").inputs.metadata.annotations["prometheus.io/scrape"]);
    assert.equal(byType("kubernetes:monitoring.coreos.com/v1:ServiceMonitor").length, 0);
  });

  test("the token is a Pulumi secret and never appears in a pod spec", async () => {
    await install({ mode: "local" });
    const stringData = one("kubernetes:core/v1:Secret").inputs.stringData;
    // Pulumi's wire form of a secret value: the engine encrypts it in state and masks it in output.
    assert.equal(stringData[secretSignatureKey], secretSignature, "the token is sent to the engine as a secret");
    assert.equal(stringData.value.token, "drv_p_abc.secret");
    const deploy = JSON.stringify(one("kubernetes:apps/v1:Deployment").inputs);
    assert.ok(!deploy.includes("drv_p_abc.secret"));
  });

  test("job mode: controller, task template with the podTemplate merged strategically, RBAC, no API access for tasks", async () => {
    await install({
      mode: "job",
      enableServiceMonitor: true,
      caBundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
      podTemplate: {
        metadata: { labels: { team: "infra" } },
        spec: {
          nodeSelector: { "kubernetes.io/os": "linux" },
          containers: [
            { name: "runner", env: [{ name: "HELLO", value: "world" }], resources: { requests: { cpu: "1" } } },
          ],
          initContainers: [{ name: "prepare", image: "busybox:1.36", command: ["true"] }],
        },
      },
    });
    const deploy = one("kubernetes:apps/v1:Deployment").inputs;
    assert.deepEqual(deploy.spec.template.spec.containers[0].args, ["agent", "controller"]);
    const env = Object.fromEntries(deploy.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]));
    assert.equal(env.DROVER_AGENT_DRIVER, "kubernetes");
    assert.equal(env.DROVER_AGENT_CONCURRENCY, "10");
    assert.equal(env.DROVER_CA_CERT, "/etc/drover/ca/ca.crt");

    const task = one("kubernetes:drover.dev/v1alpha1:AgentTask").inputs;
    const pod = task.spec.jobTemplate.template;
    assert.equal(task.spec.jobTemplate.backoffLimit, 0);
    assert.equal(pod.metadata.labels.team, "infra", "labels merged");
    assert.equal(pod.metadata.labels["app.kubernetes.io/name"], "drover-task", "existing labels kept");
    assert.equal(pod.spec.nodeSelector["kubernetes.io/os"], "linux");
    assert.deepEqual(
      pod.spec.containers.map((c: any) => c.name),
      ["worker", "runner"],
      "containers merged by name, none added",
    );
    const runner = pod.spec.containers[1];
    assert.equal(runner.image, "ghcr.io/drover-dev/drover-runner:1.11.4", "the runner's image survives the merge");
    assert.deepEqual(
      runner.env,
      [
        { name: "HOME", value: "/tmp" },
        { name: "SSL_CERT_FILE", value: "/etc/drover/ca/ca.crt" },
        { name: "HELLO", value: "world" },
      ],
      "the CA reaches runs; the template's env is merged",
    );
    assert.equal(runner.resources.requests.cpu, "1");
    assert.deepEqual(
      pod.spec.initContainers.map((c: any) => c.name),
      ["drover-init", "prepare"],
    );
    assert.equal(pod.spec.automountServiceAccountToken, false, "task pods get no API access");

    const taskSa = byType("kubernetes:core/v1:ServiceAccount").find((s) => s.name === "drv-task-sa")!;
    assert.equal(taskSa.inputs.automountServiceAccountToken, false);
    const binding = one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs;
    assert.equal(binding.subjects.length, 1);
    assert.notEqual(binding.subjects[0].name, "drv-task", "only the controller is bound to the role");
    const rules = one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs.rules;
    assert.ok(
      rules.every((r: any) => !r.verbs.includes("*") && !r.resources.includes("*")),
      "least privilege: no wildcards",
    );
    assert.equal(byType("kubernetes:monitoring.coreos.com/v1:ServiceMonitor").length, 1);
    assert.equal(byType("kubernetes:core/v1:Secret").length, 2, "token and CA bundle");
  });

  test("job mode: task pods readable Secrets (fsGroup), a stable controller name, the CRD, a hardened drover-init of the chosen image", async () => {
    await install({ mode: "job", image: "registry.example/drover:9" });
    const controller = one("kubernetes:apps/v1:Deployment").inputs.spec.template.spec.containers[0];
    const env = Object.fromEntries(controller.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    assert.equal(
      env.DROVER_AGENT_NAME,
      "drv-controller",
      "not the pod name: a replaced controller pod finds its Jobs by this name",
    );
    assert.equal(env.DROVER_AGENT_KUBERNETES_WORKER_IMAGE, "registry.example/drover:9");
    const pod = one("kubernetes:drover.dev/v1alpha1:AgentTask").inputs.spec.jobTemplate.template;
    assert.equal(pod.spec.securityContext.fsGroup, 1000, "the worker (UID 1000) can read its job Secret (mode 0400)");
    assert.equal(pod.spec.securityContext.runAsNonRoot, true);
    const init = pod.spec.initContainers.find((c: any) => c.name === "drover-init");
    assert.equal(init.image, "registry.example/drover:9");
    assert.equal(init.securityContext.allowPrivilegeEscalation, false);
    assert.deepEqual(init.securityContext.capabilities.drop, ["ALL"]);
    assert.equal(init.securityContext.seccompProfile.type, "RuntimeDefault");
    const worker = pod.spec.containers.find((c: any) => c.name === "worker");
    assert.equal(worker.image, "registry.example/drover:9");
    assert.deepEqual(worker.command, ["/usr/bin/tini", "--", "drover"], "tini reaps terraform's orphans");
    assert.deepEqual(pod.spec.nodeSelector, { "kubernetes.io/os": "linux" }, "Linux images: Linux nodes");
    const crd = one("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition").inputs;
    const { parse } = await import("yaml");
    const { readFileSync } = await import("node:fs");
    const file = parse(
      readFileSync(new URL("../../../kubernetes/agenttasks.drover.dev.yaml", import.meta.url), "utf8"),
    );
    assert.deepEqual(
      { metadata: crd.metadata, spec: crd.spec },
      { metadata: file.metadata, spec: file.spec },
      "the CRD the charts install",
    );
    await install({ mode: "job", installCrd: false });
    assert.equal(byType("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition").length, 0);
  });

  test("inputs the charts have: ServiceAccount annotations, metadata NetworkPolicy, PDB, proxy, tokenExistingSecret", async () => {
    await install({
      mode: "job",
      token: undefined,
      tokenExistingSecret: { name: "pool-token", key: "value" },
      serviceAccountAnnotations: { "iam.gke.io/gcp-service-account": "ctl@p.iam.gserviceaccount.com" },
      taskServiceAccountAnnotations: { "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/runs" },
      podDisruptionBudget: { maxUnavailable: 1 },
      proxy: { httpsProxy: "http://proxy:3128", noProxy: ".svc" },
    });
    assert.equal(byType("kubernetes:core/v1:Secret").length, 0, "no token Secret of its own");
    const controller = one("kubernetes:apps/v1:Deployment").inputs.spec.template.spec.containers[0];
    const env = Object.fromEntries(controller.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    assert.deepEqual(env.DROVER_TOKEN.secretKeyRef, { name: "pool-token", key: "value" });
    assert.equal(env.HTTPS_PROXY, "http://proxy:3128");
    assert.equal(env.NO_PROXY, ".svc");
    assert.equal(env.HTTP_PROXY, undefined);
    const sas = Object.fromEntries(
      byType("kubernetes:core/v1:ServiceAccount").map((s) => [s.name, s.inputs.metadata.annotations]),
    );
    assert.deepEqual(sas["drv-sa"], { "iam.gke.io/gcp-service-account": "ctl@p.iam.gserviceaccount.com" });
    assert.deepEqual(sas["drv-task-sa"], { "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/runs" });
    const pod = one("kubernetes:drover.dev/v1alpha1:AgentTask").inputs.spec.jobTemplate.template;
    for (const c of pod.spec.containers)
      assert.deepEqual(
        c.env.filter((e: any) => /PROXY/.test(e.name)),
        [
          { name: "HTTPS_PROXY", value: "http://proxy:3128" },
          { name: "NO_PROXY", value: ".svc" },
        ],
        c.name,
      );
    const pdb = one("kubernetes:policy/v1:PodDisruptionBudget").inputs.spec;
    assert.equal(pdb.maxUnavailable, 1);
    assert.deepEqual(pdb.selector.matchLabels, one("kubernetes:apps/v1:Deployment").inputs.spec.selector.matchLabels);
    const policy = one("kubernetes:networking.k8s.io/v1:NetworkPolicy").inputs.spec;
    assert.deepEqual(policy.podSelector.matchLabels, pod.metadata.labels);
    assert.deepEqual(
      policy.egress[0].to.map((t: any) => t.ipBlock.except),
      [
        ["169.254.169.254/32", "100.100.100.200/32", "168.63.129.16/32"],
        ["fd00:ec2::254/128", "fd20:ce::254/128", "fe80::a9fe:a9fe/128"],
      ],
    );
    // CNIs that match no pod by ipBlock (Cilium) still let runs reach in-cluster pods and DNS.
    assert.deepEqual(policy.egress.slice(1), [
      { to: [{ namespaceSelector: {} }] },
      {
        ports: [
          { port: 53, protocol: "UDP" },
          { port: 53, protocol: "TCP" },
        ],
      },
    ]);
    await install({ mode: "job", allowMetadataService: true });
    assert.equal(byType("kubernetes:networking.k8s.io/v1:NetworkPolicy").length, 0);
    assert.equal(byType("kubernetes:policy/v1:PodDisruptionBudget").length, 0, "no PDB unless asked for");
  });

  test("node mode: controller with the node home, a per-node worker DaemonSet whose Role reads pods only", async () => {
    await install({
      mode: "node",
      url: "https://d.example",
      nodeDataHome: "/srv/drover",
      nodeSelector: { pool: "runs" },
      proxy: { httpsProxy: "http://p:3128" },
    });
    const controller = one("kubernetes:apps/v1:Deployment").inputs.spec.template.spec.containers[0];
    const env = Object.fromEntries(controller.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    assert.deepEqual(controller.args, ["agent", "controller"]);
    assert.equal(env.DROVER_AGENT_NODE_HOME, "/srv/drover");
    assert.equal(env.DROVER_AGENT_NAME, "drv-controller");
    const ds = one("kubernetes:apps/v1:DaemonSet").inputs;
    assert.equal(ds.spec.updateStrategy.type, "OnDelete", "an upgrade does not restart workers under runs");
    const pod = ds.spec.template.spec;
    assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux", pool: "runs" }, "Linux, and the user's keys");
    const taskPod = one("kubernetes:drover.dev/v1alpha1:AgentTask").inputs.spec.jobTemplate.template.spec;
    assert.deepEqual(taskPod.nodeSelector, pod.nodeSelector, "run pods land where a node worker runs");
    assert.equal(ds.spec.template.metadata.annotations, undefined, "no do-not-evict annotations (no-ops here, I3)");
    assert.equal(pod.securityContext.fsGroup, 1000);
    assert.equal(pod.securityContext.fsGroupChangePolicy, "OnRootMismatch");
    const worker = pod.containers[0];
    assert.deepEqual(worker.args, ["agent", "node-worker"]);
    const wenv = Object.fromEntries(worker.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    assert.equal(wenv.DROVER_AGENT_CONTROLLER_NAME, env.DROVER_AGENT_NAME, "it supervises this controller's run pods");
    assert.equal(wenv.DROVER_AGENT_NODE_HOME, "/srv/drover");
    assert.equal(wenv.DROVER_URL, "https://d.example");
    assert.equal(wenv.HTTPS_PROXY, "http://p:3128");
    assert.equal(wenv.DROVER_TOKEN, undefined, "no pool token in the node worker");
    assert.deepEqual(pod.volumes[0].hostPath, { path: "/srv/drover", type: "Directory" });
    assert.deepEqual(worker.volumeMounts[0], { name: "home", mountPath: "/srv/drover" });
    assert.equal(
      pod.serviceAccountName,
      env.DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT,
      "the controller grants each run's job Secret to this ServiceAccount",
    );
    const roles = Object.fromEntries(
      byType("kubernetes:rbac.authorization.k8s.io/v1:Role").map((r) => [r.name, r.inputs.rules]),
    );
    const workerRules = [{ apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] }];
    assert.deepEqual(roles["drv-node-worker"], workerRules, "no Secret: not the pool token");
    assert.ok(
      roles["drv-controller"].some(
        (r: any) =>
          r.resources.includes("roles") && r.resources.includes("rolebindings") && r.verbs.join() === "create",
      ),
    );
    assert.ok(
      roles["drv-controller"].every(
        (r: any) =>
          !r.resources.includes("pods/log") && !(r.resources.includes("secrets") && r.verbs.includes("delete")),
      ),
      "trimmed to the calls the code makes",
    );
    await install({ mode: "job" });
    assert.equal(byType("kubernetes:apps/v1:DaemonSet").length, 0);
    const jobRules = one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs.rules;
    assert.ok(
      jobRules.every((r: any) => !r.resources.includes("roles")),
      "job mode grants no RBAC creation",
    );
  });

  test("B7: a controller Deployment is replaced, never rolled (two would launch the same Jobs)", async () => {
    for (const mode of ["job", "node"]) {
      await install({ mode });
      assert.deepEqual(one("kubernetes:apps/v1:Deployment").inputs.spec.strategy, { type: "Recreate" }, mode);
    }
    await install({ mode: "local" });
    assert.equal(one("kubernetes:apps/v1:Deployment").inputs.spec.strategy.type, "RollingUpdate");
  });

  test("B13: run pods have a bounded writable /tmp, HOME=/tmp and resources (Burstable, not BestEffort)", async () => {
    for (const mode of ["job", "node"]) {
      await install({ mode });
      const pod = one("kubernetes:drover.dev/v1alpha1:AgentTask").inputs.spec.jobTemplate.template.spec;
      const tmp = pod.volumes.find((v: any) => v.name === "tmp");
      assert.equal(tmp.emptyDir.sizeLimit, "1Gi", mode);
      for (const c of [...pod.containers, ...pod.initContainers]) {
        assert.ok(
          c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory,
          `${mode} ${c.name}`,
        );
      }
      const runner = pod.containers.find((c: any) => c.name === "runner");
      assert.ok(
        runner.volumeMounts.some((m: any) => m.name === "tmp" && m.mountPath === "/tmp"),
        mode,
      );
      assert.ok(
        runner.env.some((e: any) => e.name === "HOME" && e.value === "/tmp"),
        mode,
      );
    }
  });

  test("B14: the cluster-wide AgentTask CRD is retained by pulumi destroy; the namespaced objects are not", async () => {
    const retained = new Map<string, boolean | undefined>();
    // The SDK hands every child's options to its parent's transformations: read retainOnDelete there.
    await install({ mode: "job" }, { transformations: [(a) => void retained.set(a.name, a.opts.retainOnDelete)] });
    assert.equal(retained.get("drv-agenttasks-crd"), true);
    assert.equal(retained.get("drv-deployment"), undefined);
    assert.equal(retained.get("drv-task-template"), undefined);
  });

  test("U4: local mode puts the metadata NetworkPolicy on the agent pods (they run the runs)", async () => {
    await install({ mode: "local" });
    const policy = one("kubernetes:networking.k8s.io/v1:NetworkPolicy").inputs.spec;
    const podLabels = one("kubernetes:apps/v1:Deployment").inputs.spec.template.metadata.labels;
    for (const [k, v] of Object.entries(policy.podSelector.matchLabels)) assert.equal(podLabels[k], v, k);
    assert.deepEqual(
      policy.egress[0].to.map((t: any) => t.ipBlock.except[0]),
      ["169.254.169.254/32", "fd00:ec2::254/128"],
    );
    await install({ mode: "local", allowMetadataService: true });
    assert.equal(byType("kubernetes:networking.k8s.io/v1:NetworkPolicy").length, 0);
  });

  test("I18: node workers have the chart's requests and memory limit; every agent emptyDir has a size limit", async () => {
    await install({ mode: "node" });
    const ds = one("kubernetes:apps/v1:DaemonSet").inputs.spec.template.spec;
    assert.deepEqual(ds.containers[0].resources, {
      requests: { cpu: "500m", memory: "512Mi", "ephemeral-storage": "64Mi" },
      limits: { memory: "2Gi" },
    });
    for (const mode of ["local", "job", "node"]) {
      await install({ mode });
      const pods = [...byType("kubernetes:apps/v1:Deployment"), ...byType("kubernetes:apps/v1:DaemonSet")].map(
        (d) => d.inputs.spec.template.spec,
      );
      for (const v of pods.flatMap((p) => p.volumes).filter((v: any) => v.emptyDir))
        assert.ok(v.emptyDir.sizeLimit, `${mode} ${v.name}`);
    }
  });

  test("bad settings are refused with one clear message", async () => {
    const { validateArgs } = await import("../src/index.js");
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", shutdownMode: "drain", terminationGracePeriodSeconds: 60 }),
      /too short for shutdownMode drain/,
    );
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", env: { DROVER_TOKEN: "x" } }),
      /set by the component/,
    );
    assert.throws(() => validateArgs({ namespace: "n", token: "t", concurrency: 6 }), /at most 5/);
    assert.doesNotThrow(() =>
      validateArgs({ namespace: "n", token: "t", shutdownMode: "force", terminationGracePeriodSeconds: 10 }),
    );
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", mode: "job", replicas: 2 }),
      /replicas 2 in job mode: exactly one controller may run/,
    );
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", mode: "node", replicas: 3 }),
      /replicas 3 in node mode: exactly one controller may run/,
    );
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", mode: "node", nodeDataHome: "relative/dir" }),
      /nodeDataHome must be an absolute path/,
    );
    assert.doesNotThrow(() => validateArgs({ namespace: "n", token: "t", mode: "local", replicas: 3 }));
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", tokenExistingSecret: { name: "s" } }),
      /exactly one of token and tokenExistingSecret/,
    );
    assert.throws(() => validateArgs({ namespace: "n" }), /exactly one of token and tokenExistingSecret/);
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", podDisruptionBudget: { minAvailable: 1 } }),
      /lets no pod be evicted/,
    );
    assert.throws(
      () => validateArgs({ namespace: "n", token: "t", podDisruptionBudget: { maxUnavailable: "0%" } }),
      /lets no pod be evicted/,
    );
    assert.doesNotThrow(() =>
      validateArgs({ namespace: "n", token: "t", replicas: 3, podDisruptionBudget: { minAvailable: "50%" } }),
    );
  });

  test("its reserved names and grace minimums are the settings table's; every variable it sets is a setting", async () => {
    const { validateArgs } = await import("../src/index.js");
    const { minimumGraceSeconds, reservedSettings, settings, stopActions } = await import("@drover/protocol");
    for (const name of reservedSettings())
      assert.throws(
        () => validateArgs({ namespace: "n", token: "t", env: { [name]: "x" } }),
        /set by the component/,
        name,
      );
    for (const mode of stopActions) {
      assert.throws(
        () =>
          validateArgs({
            namespace: "n",
            token: "t",
            shutdownMode: mode,
            terminationGracePeriodSeconds: minimumGraceSeconds[mode] - 1,
          }),
        /too short/,
      );
      assert.doesNotThrow(() =>
        validateArgs({
          namespace: "n",
          token: "t",
          shutdownMode: mode,
          terminationGracePeriodSeconds: minimumGraceSeconds[mode],
        }),
      );
    }
    const set = new Set<string>();
    for (const mode of ["local", "job", "node"]) {
      await install({
        mode,
        url: "https://d.example",
        caBundle: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
      });
      for (const name of JSON.stringify(created.map((c) => c.inputs)).match(/"DROVER_[A-Z0-9_]+"/g) ?? [])
        set.add(JSON.parse(name) as string);
    }
    assert.ok(set.has("DROVER_AGENT_NODE_HOME"), "the scan sees the node mode's variables");
    assert.deepEqual(
      [...set].filter((n) => !(n in settings)),
      [],
    );
  });

  test("strategic merge: named lists merge, other lists are replaced, null deletes", async () => {
    const { strategicMerge } = await import("../src/index.js");
    const base = {
      containers: [{ name: "a", image: "x", env: [{ name: "K", value: "1" }] }],
      tolerations: [{ key: "t1" }],
      dnsPolicy: "ClusterFirst",
    };
    const merged = strategicMerge(base, {
      containers: [
        { name: "a", env: [{ name: "L", value: "2" }] },
        { name: "b", image: "y" },
      ],
      tolerations: [{ key: "t2" }],
      dnsPolicy: null,
    });
    assert.deepEqual(merged, {
      containers: [
        {
          name: "a",
          image: "x",
          env: [
            { name: "K", value: "1" },
            { name: "L", value: "2" },
          ],
        },
        { name: "b", image: "y" },
      ],
      tolerations: [{ key: "t2" }],
    });
    assert.deepEqual(base.containers[0]!.env, [{ name: "K", value: "1" }], "inputs are not modified");
  });
});
