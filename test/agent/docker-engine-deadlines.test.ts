import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { DockerApiError, DockerEngine } from "@drover/agent/docker";
import { within } from "../support/poll.js";

// The Docker Engine API client against a daemon that stops answering (a hung dockerd or podman
// service, a registry that stalls a pull): every call ends by its deadline, and closing the
// client does not wait for a call that never ends.

const dir = mkdtempSync(join(tmpdir(), "drover-docker-deadlines-"));
const servers: Server[] = [];
const sockets = new Set<Socket>();
after(async () => {
  for (const s of sockets) s.destroy();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  rmSync(dir, { recursive: true, force: true });
});

/** A unix socket that takes connections and answers each request as `answer` says (or not at all). */
async function daemon(name: string, answer: (socket: Socket, requestLine: string) => void): Promise<string> {
  const path = join(dir, `${name}.sock`);
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => undefined);
    socket.on("data", (data) => answer(socket, data.toString("latin1").split("\r\n")[0]!));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return path;
}

const spec = {
  Image: "runner",
  Entrypoint: ["/bin/true"],
  Cmd: [],
  User: "65532:65532",
  Env: [],
  WorkingDir: "/",
  Labels: {},
  HostConfig: {
    Binds: [],
    Tmpfs: {},
    ReadonlyRootfs: true,
    NetworkMode: "host",
    CapDrop: ["ALL"],
    SecurityOpt: [],
    AutoRemove: false as const,
  },
};

test("a daemon that never answers: each call fails at its deadline, naming the call", async () => {
  const engine = new DockerEngine(await daemon("silent", () => undefined), { callTimeoutMs: 300 });
  try {
    for (const call of [
      () => engine.create("job", spec),
      () => engine.start("c1"),
      () => engine.hasImage("runner:1"),
      () => engine.list(["drover.dev/agent-tag=x"]),
      () => engine.remove("c1"),
    ]) {
      await assert.rejects(call(), (err: unknown) => {
        assert.ok(err instanceof DockerApiError, String(err));
        assert.equal(err.status, 0);
        assert.match(err.message, /did not answer .* within 300 ms/);
        return true;
      });
    }
  } finally {
    await engine.close();
  }
});

test("a pull whose progress stops fails once nothing came for the silence allowed, however long it ran", async () => {
  // Progress every 100 ms for a second (three times the silence allowed), then none.
  const path = await daemon("stalled-pull", (socket) => {
    socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
    const line = '{"status":"Downloading"}\n';
    let sent = 0;
    const progress = setInterval(() => {
      if (++sent > 10 || socket.destroyed) return clearInterval(progress);
      socket.write(`${Buffer.byteLength(line).toString(16)}\r\n${line}\r\n`);
    }, 100);
  });
  const engine = new DockerEngine(path, { callTimeoutMs: 300, pullSilenceMs: 300 });
  const started = Date.now();
  try {
    await assert.rejects(engine.pull("registry.example/runner:1"), (err: unknown) => {
      assert.ok(err instanceof DockerApiError, String(err));
      assert.match(err.message, /sent nothing for 300 ms/);
      return true;
    });
    assert.ok(
      Date.now() - started >= 1_000,
      `the pull was given up while progress came, after ${Date.now() - started} ms`,
    );
  } finally {
    await engine.close();
  }
});

test("closing the client does not wait for a call that has no deadline (a container's wait)", async () => {
  const engine = new DockerEngine(await daemon("never-exits", () => undefined), { callTimeoutMs: 300 });
  const waiting = engine.wait("c1").catch((err: unknown) => err);
  assert.notEqual(
    await within(
      engine.close().then(() => "closed"),
      5_000,
    ),
    null,
    "close returned",
  );
  assert.ok((await waiting) instanceof Error, "the wait ended with an error");
});

test("a pull of a reference without a tag asks for :latest, not every tag of the repository", async () => {
  const asked: string[] = [];
  const path = await daemon("pulls", (socket, requestLine) => {
    asked.push(requestLine);
    socket.write("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
  });
  const engine = new DockerEngine(path, { callTimeoutMs: 5_000 });
  try {
    for (const image of ["runner", "localhost:5000/team/runner", "runner:1", "runner@sha256:" + "a".repeat(64)])
      await engine.pull(image);
  } finally {
    await engine.close();
  }
  assert.deepEqual(
    asked.map((line) => new URLSearchParams(line.split(" ")[1]!.split("?")[1]).get("tag")),
    ["latest", "latest", null, null],
  );
});
