// A container of the test cluster's kubelet keeps all its output, however quickly it writes
// it: the setup's "started" byte and the container's first line come on different pipes,
// read in no fixed order. (A pod's log came back empty under load when its output was read
// first and taken for the setup's.)
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type * as Process from "../../tools/kube-test-cluster/src/node/container-process.js";

const moduleUrl = new URL("../../../tools/kube-test-cluster/dist/node/container-process.js", import.meta.url);
const { ContainerProcess } = (await import(moduleUrl.href)) as typeof Process;
const asRoot = process.getuid?.() === 0;

describe("test cluster container output", () => {
  it(
    "every one of 60 containers started at once that prints at once has its whole output",
    {
      skip: !asRoot && "namespace isolation needs root",
    },
    async (t) => {
      const dir = mkdtempSync(join(tmpdir(), "ktc-output-"));
      t.after(() => rmSync(dir, { recursive: true, force: true }));
      const outputs = await Promise.all(
        Array.from({ length: 60 }, async (_, i) => {
          let out = "";
          const p = new ContainerProcess({
            argv: ["/bin/sh", "-c", `echo out ${i}; echo err ${i} >&2`],
            env: {},
            workingDir: "/",
            mounts: [],
            rootDir: join(dir, String(i)),
            isolation: "namespace",
            onOutput: (d) => (out += d.toString()),
          });
          await p.started;
          const exit = await p.exited;
          assert.equal(exit.exitCode, 0);
          return out;
        }),
      );
      const lost = outputs.flatMap((out, i) =>
        [`out ${i}\n`, `err ${i}\n`].every((line) => out.includes(line)) ? [] : [`${i}: ${JSON.stringify(out)}`],
      );
      assert.deepEqual(lost, []);
    },
  );

  it(
    "a setup that fails is a start error naming the setup's message, not container output",
    {
      skip: !asRoot && "namespace isolation needs root",
    },
    async (t) => {
      const dir = mkdtempSync(join(tmpdir(), "ktc-output-"));
      t.after(() => rmSync(dir, { recursive: true, force: true }));
      let out = "";
      const p = new ContainerProcess({
        argv: ["/bin/true"],
        env: {},
        workingDir: "/",
        mounts: [{ hostPath: join(dir, "absent"), containerPath: "/data", readOnly: false }],
        rootDir: join(dir, "root"),
        isolation: "namespace",
        onOutput: (d) => (out += d.toString()),
      });
      await assert.rejects(p.started, /absent|No such file/);
      await p.exited;
      assert.equal(out, "");
    },
  );
});
