import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { loadAgentConfig } from "@drover/agent";
import { newPoolToken, settings, type SettingName, type SettingReader, type SettingSpec } from "@drover/protocol";
import { droverBin } from "../support/processes.js";

// The README's "Run Drover with Docker on a VM" is copied by users: its `docker run` lines and
// its systemd unit must name settings that exist, with values their parsers accept, commands and
// flags the CLI has, and stop timeouts that match the grace period.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const readme = readFileSync(join(repo, "README.md"), "utf8");
const start = readme.indexOf("## Run Drover with Docker on a VM");
const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
const token = newPoolToken({ url: "http://drover.example.internal:8800", pool: "pool_vm" });

/** The fenced blocks of one language in the section. */
function blocks(lang: string): string[] {
  return [...section.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1]!);
}

/** Splits a shell command line into words (quotes kept together; enough for these lines). */
function words(line: string): string[] {
  return [...line.matchAll(/"(?:[^"\\]|\\.)*"|'[^']*'|\S+/g)].map((m) => m[0].replace(/^["']|["']$/g, ""));
}

interface DockerRun {
  env: Record<string, string>;
  volumes: Array<[string, string]>;
  options: Map<string, string>;
  image: string;
  args: string[];
}

/** The `docker run` commands of the section's sh blocks, continuation lines joined. */
function dockerRuns(): DockerRun[] {
  const runs: DockerRun[] = [];
  for (const block of blocks("sh")) {
    for (const command of block.replace(/\\\n\s*/g, " ").split("\n")) {
      const w = words(command.trim());
      if (w[0] !== "docker" || w[1] !== "run") continue;
      const run: DockerRun = { env: {}, volumes: [], options: new Map(), image: "", args: [] };
      let i = 2;
      for (; i < w.length && w[i]!.startsWith("-"); i++) {
        const opt = w[i]!;
        if (opt === "-d" || opt === "--read-only") continue;
        const value = w[++i]!;
        if (opt === "-e") {
          const eq = value.indexOf("=");
          run.env[value.slice(0, eq)] = value.slice(eq + 1);
        } else if (opt === "-v") {
          const [source, dest] = value.split(":");
          run.volumes.push([source!, dest!]);
        } else run.options.set(opt, value);
      }
      run.image = w[i]!;
      run.args = w.slice(i + 1);
      runs.push(run);
    }
  }
  return runs;
}

/** Every variable is a setting its reader reads, and its value is one the setting's parser accepts. */
function checkSettings(env: Record<string, string>, reader: SettingReader, where: string): void {
  for (const [name, value] of Object.entries(env)) {
    assert.ok(name in settings, `${where}: ${name} is not a setting`);
    const spec: SettingSpec<unknown> = settings[name as SettingName];
    assert.ok(spec.readers.includes(reader), `${where}: ${name} is not read by the ${reader}`);
    // Paths of the user's machine need not exist here; every other value must parse.
    if (!name.endsWith("_FILE")) assert.doesNotThrow(() => spec.parse(value, name), `${where}: ${name}=${value}`);
  }
}

/** `drover <args> --help` lists every flag given after the command. */
function checkCommand(args: string[], where: string): void {
  const command = args.filter((a) => !a.startsWith("-"));
  const help = spawnSync(process.execPath, [droverBin, ...command, "--help"], { encoding: "utf8" });
  assert.equal(help.status, 0, `${where}: drover ${command.join(" ")} is not a command:\n${help.stderr}`);
  for (const flag of args.filter((a) => a.startsWith("--")))
    assert.ok(help.stdout.includes(flag.split("=")[0]!), `${where}: drover ${command.join(" ")} has no ${flag}`);
}

test("the README's docker run lines name real settings, commands and flags, and the agent's line compiles to a docker-driver agent", () => {
  const runs = dockerRuns();
  const server = runs.find((r) => r.args[0] === "server");
  const agent = runs.find((r) => r.args.join(" ").startsWith("agent run"));
  assert.ok(server && agent, `a server and an agent docker run line:\n${section}`);
  checkSettings(server.env, "server", "server line");
  checkCommand(server.args, "server line");
  checkSettings(agent.env, "agent", "agent line");
  checkCommand(agent.args, "agent line");
  assert.equal(server.image.replace(/:.*/, ""), agent.image.replace(/:.*/, ""), "both run the drover image");

  const { DROVER_TOKEN_FILE: tokenFile, ...env } = agent.env;
  assert.ok(tokenFile, "the agent reads its token from a file");
  assert.ok(
    agent.volumes.some(([, dest]) => dest === tokenFile),
    "the token file is mounted",
  );
  const config = loadAgentConfig({ ...env, DROVER_TOKEN: token });
  assert.equal(config.driver, "docker");
  assert.equal(config.docker?.socketPath, "/var/run/docker.sock");
  assert.ok(
    agent.volumes.some(([source, dest]) => source === config.docker?.socketPath && dest === source),
    "the agent's container has the Docker socket",
  );
  // Runs' bind mounts are resolved by the daemon on the host: the data dir must be the same path inside and out.
  assert.ok(
    agent.volumes.some(([source, dest]) => source === dest && config.dataDir.startsWith(`${dest}/`)),
    `the data dir ${config.dataDir} is mounted at its own host path: ${JSON.stringify(agent.volumes)}`,
  );
  assert.equal(
    Number(agent.options.get("--stop-timeout")),
    config.gracePeriodMs / 1000,
    "docker stop waits the whole grace period",
  );
  assert.match(agent.options.get("--user") ?? "", /^\d+:\d+$/, "the agent's container is not root");
});

test("the README's systemd unit is deploy/systemd/drover-agent-docker.service, its settings exist and compile to a docker-driver agent", () => {
  const file = readFileSync(join(repo, "deploy", "systemd", "drover-agent-docker.service"), "utf8");
  const [unit] = blocks("ini");
  assert.equal(unit, file, "the README shows the unit file as it is");
  const env: Record<string, string> = {};
  for (const m of file.matchAll(/^Environment=([A-Z_]+)=(.*)$/gm)) env[m[1]!] = m[2]!;
  checkSettings(env, "agent", "systemd unit");
  const exec = /^ExecStart=(\S+) (.*)$/m.exec(file);
  assert.equal(exec?.[1], "/usr/local/bin/drover");
  checkCommand(words(exec![2]!), "systemd unit");
  const config = loadAgentConfig({ ...env, DROVER_TOKEN: token });
  assert.equal(config.driver, "docker");
  assert.equal(
    Number(/^TimeoutStopSec=(\d+)$/m.exec(file)?.[1]),
    config.gracePeriodMs / 1000,
    "systemd waits the whole grace period",
  );
  assert.match(file, /^SupplementaryGroups=docker$/m, "the agent may use the Docker socket");
  assert.match(file, /^Requires=docker\.service$/m);
});
