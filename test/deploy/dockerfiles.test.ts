import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

// The Dockerfiles as text (images.test.ts builds and runs them): what a build would copy
// exists, the final stage is non-root, the entry points are ours.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const read = (p: string) => readFileSync(join(repo, p), "utf8");

interface Stage {
  from: string;
  lines: string[];
}

function stages(dockerfile: string): Stage[] {
  const joined = dockerfile.replace(/\\\n/g, " ");
  const out: Stage[] = [];
  for (const raw of joined.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    if (/^FROM\s/i.test(line)) out.push({ from: line, lines: [] });
    else out.at(-1)?.lines.push(line);
  }
  return out;
}

function copiedSources(stage: Stage): string[] {
  return stage.lines
    .filter((l) => /^COPY\s/i.test(l) && !/--from=/.test(l))
    .flatMap((l) =>
      l
        .split(/\s+/)
        .slice(1, -1)
        .filter((t) => !t.startsWith("--")),
    );
}

for (const file of ["deploy/docker/Dockerfile", "deploy/docker/runner.Dockerfile"]) {
  test(`${file}: every COPY source exists and the final stage runs as UID 1000`, () => {
    const all = stages(read(file));
    assert.ok(all.length >= 1);
    for (const stage of all)
      for (const src of copiedSources(stage))
        assert.ok(existsSync(join(repo, src)), `${file} copies ${src}, which does not exist`);
    const last = all.at(-1)!;
    const user = last.lines.filter((l) => /^USER\s/i.test(l)).at(-1);
    assert.equal(user, "USER 1000:1000", "the image runs as the unprivileged UID/GID 1000");
  });
}

test("the drover image's entrypoint is the drover binary under an init", () => {
  const last = stages(read("deploy/docker/Dockerfile")).at(-1)!;
  const entry = last.lines.find((l) => l.startsWith("ENTRYPOINT"));
  assert.match(entry ?? "", /tini.*drover/);
  assert.ok(
    last.lines.some((l) => l.includes("packages/cli/dist/src/main.js")),
    "the CLI entry point is linked onto PATH",
  );
});

test("the runner image's entrypoint is the exec-loop", () => {
  const last = stages(read("deploy/docker/runner.Dockerfile")).at(-1)!;
  assert.ok(
    last.lines.some((l) => l.startsWith("COPY packages/agent/exec-loop/exec-loop.sh /usr/local/bin/drover-exec-loop")),
  );
  assert.ok(last.lines.includes('ENTRYPOINT ["/usr/local/bin/drover-exec-loop"]'));
});

test("the systemd agent unit gives the agent its whole grace period to stop", () => {
  const unit = read("deploy/systemd/drover-agent.service");
  assert.match(unit, /^ExecStart=\/usr\/local\/bin\/drover agent run$/m);
  const grace = Number(unit.match(/DROVER_AGENT_GRACE_PERIOD_SECONDS=(\d+)/)?.[1]);
  const timeout = Number(unit.match(/^TimeoutStopSec=(\d+)/m)?.[1]);
  assert.ok(timeout >= grace, `TimeoutStopSec ${timeout} must cover the grace period ${grace}`);
  assert.match(unit, /^User=drover$/m);
});
