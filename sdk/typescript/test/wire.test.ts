// What the SDK sends and how it reads answers, against a local fake gateway. The real gateway is exercised by
// test/integration.test.ts (test/e2e runs it).
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import {
  AuthenticationError,
  ClusterUnavailableError,
  ConnectionError,
  ExecTimeout,
  InvalidRequestError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  RateLimitedError,
  Sandbox,
  SandboxLostError,
  SandboxNotReadyError,
  TooLargeError,
} from "@airlock-dev/sdk";
import { execResult, fakeGateway, sandboxView, send, type Handler } from "./fake.js";

/** A fake gateway that creates sandbox sbx-1 and hands every other call to `rest`. */
async function withSandbox(rest: Handler, fn: (sbx: Sandbox, gw: Awaited<ReturnType<typeof fakeGateway>>) => Promise<void>) {
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST" && req.path === "/v1/sandboxes") return send(res, 201, sandboxView("sbx-1"));
    return rest(req, res);
  });
  try {
    await fn(await Sandbox.create(gw.conn), gw);
  } finally {
    await gw.close();
  }
}

const errorBody = (code: string, message = code, extra: Record<string, unknown> = {}) => ({ error: { code, message, ...extra } });

test("create sends the options in the gateway's names and waits while the sandbox is pending", async () => {
  let polls = 0;
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST") return send(res, 201, sandboxView("sbx-2", "pending"));
    polls++;
    send(res, 200, sandboxView("sbx-2", polls < 2 ? "pending" : "ready", { network: "none", metadata: { conv: "7" } }));
  });
  try {
    const sbx = await Sandbox.create({
      ...gw.conn, template: "python-node", size: "small", timeoutMinutes: 30, idleTimeoutMinutes: 10, network: "off",
      env: { A: "1" }, secrets: { GIT_TOKEN: "t0ken" }, metadata: { conv: "7" },
    });
    assert.equal(sbx.id, "sbx-2");
    const create = gw.seen[0]!;
    assert.equal(create.path, "/v1/sandboxes");
    assert.equal(create.headers.authorization, "Bearer alk_test_secret");
    assert.match(String(create.headers["user-agent"]), /^airlock-sdk-typescript\/\d/);
    assert.deepEqual(create.json(), {
      template: "python-node", size: "small", timeout_minutes: 30, idle_timeout_minutes: 10, network: "none",
      env: { A: "1" }, secrets: { GIT_TOKEN: "t0ken" }, metadata: { conv: "7" },
    });
    assert.equal(polls, 2);
    const info = await sbx.info();
    assert.equal(info.status, "ready");
    assert.equal(info.workingDir, "/home/sandbox");
    assert.deepEqual(info.metadata, { conv: "7" });
    assert.ok(info.createdAt instanceof Date);
  } finally {
    await gw.close();
  }
});

test("a sandbox that fails while starting is deleted and reported", async () => {
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST") return send(res, 201, sandboxView("sbx-3", "failed", { reason: "ImagePullFailed", message: "no such image" }));
    if (req.method === "DELETE") return send(res, 200, sandboxView("sbx-3", "terminating"));
  });
  try {
    await assert.rejects(Sandbox.create(gw.conn), (err: SandboxNotReadyError) => {
      assert.ok(err instanceof SandboxNotReadyError);
      assert.equal(err.phase, "failed");
      assert.equal(err.reason, "ImagePullFailed");
      return true;
    });
    assert.deepEqual(gw.seen.map((s) => `${s.method} ${s.path}`), ["POST /v1/sandboxes", "DELETE /v1/sandboxes/sbx-3"]);
  } finally {
    await gw.close();
  }
});

test("key and URL come from AIRLOCK_API_KEY and AIRLOCK_API_URL (with or without /v1)", async () => {
  const gw = await fakeGateway((_req, res) => send(res, 200, { sandboxes: [sandboxView("sbx-a"), sandboxView("sbx-b")] }));
  const saved = { key: process.env.AIRLOCK_API_KEY, url: process.env.AIRLOCK_API_URL };
  try {
    process.env.AIRLOCK_API_KEY = "alk_env_key";
    process.env.AIRLOCK_API_URL = gw.url + "/v1/";
    const list = await Sandbox.list();
    assert.deepEqual(list.map((s) => s.id), ["sbx-a", "sbx-b"]);
    assert.equal(gw.seen[0]!.path, "/v1/sandboxes");
    assert.equal(gw.seen[0]!.headers.authorization, "Bearer alk_env_key");
    delete process.env.AIRLOCK_API_KEY;
    await assert.rejects(Sandbox.list(), /AIRLOCK_API_KEY/);
  } finally {
    process.env.AIRLOCK_API_KEY = saved.key ?? "";
    process.env.AIRLOCK_API_URL = saved.url ?? "";
    if (saved.key === undefined) delete process.env.AIRLOCK_API_KEY;
    if (saved.url === undefined) delete process.env.AIRLOCK_API_URL;
    await gw.close();
  }
});

test("exec: options in the gateway's names; a non-zero exit is a result", async () => {
  await withSandbox(
    (_req, res) => send(res, 200, execResult({ exit_code: 3, stderr: "boom\n", stderr_bytes: 5, duration_ms: 12 })),
    async (sbx, gw) => {
      const r = await sbx.exec("exit 3", { timeoutSeconds: 5, cwd: "/tmp", env: { X: "y" }, stdin: "in", maxOutputBytes: 1024 });
      assert.deepEqual(gw.seen[1]!.json(), { command: "exit 3", timeout_ms: 5000, cwd: "/tmp", env: { X: "y" }, stdin: "in", max_output_bytes: 1024 });
      assert.equal(gw.seen[1]!.path, "/v1/sandboxes/sbx-1/exec");
      assert.equal(r.exitCode, 3);
      assert.equal(r.stderr, "boom\n");
      assert.equal(r.outcome, "exited");
      assert.equal(r.durationMs, 12);
      assert.equal(r.truncated, false);
      assert.deepEqual(r.truncation.stderr, { truncated: false, keptBytes: 0, omittedBytes: 0 });
      await sbx.exec(["python3", "-c", "print(1)"]);
      assert.deepEqual(gw.seen[2]!.json(), { argv: ["python3", "-c", "print(1)"], timeout_ms: 60000 });
    },
  );
});

test("exec: a timeout is a result with exit code 124; ExecTimeout only when asked for", async () => {
  const timedOut = execResult({ exit_code: -1, outcome: "timeout", signal: "SIGKILL", stdout: "partial\n" });
  await withSandbox((_req, res) => send(res, 200, timedOut), async (sbx) => {
    const r = await sbx.exec("sleep 100", { timeoutSeconds: 1 });
    assert.equal(r.outcome, "timeout");
    assert.equal(r.exitCode, 124);
    assert.equal(r.signal, "SIGKILL");
    assert.equal(r.stdout, "partial\n");
    await assert.rejects(sbx.exec("sleep 100", { timeoutSeconds: 1, throwOnTimeout: true }), (err: ExecTimeout) => {
      assert.ok(err instanceof ExecTimeout);
      assert.equal(err.result.stdout, "partial\n");
      return true;
    });
  });
});

test("exec with callbacks streams NDJSON and calls them as lines arrive", async () => {
  await withSandbox(
    async (req, res) => {
      assert.equal(req.headers.accept, "application/x-ndjson");
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ stream: "stdout", data: "one\n" }) + "\n");
      // A line split across writes, and a multi-byte character split across them, must arrive whole.
      const line = Buffer.from(JSON.stringify({ stream: "stderr", data: "zwei – 🙂\n" }) + "\n");
      res.write(line.subarray(0, 30));
      await new Promise((r) => setTimeout(r, 50));
      res.write(line.subarray(30));
      res.end(JSON.stringify(execResult({ stdout: "one\n", stderr: "zwei – 🙂\n", exit_code: 1 })) + "\n");
    },
    async (sbx) => {
      const got: string[] = [];
      const r = await sbx.exec("x", { onStdout: (d) => void got.push(`out:${d}`), onStderr: async (d) => void got.push(`err:${d}`) });
      assert.deepEqual(got, ["out:one\n", "err:zwei – 🙂\n"]);
      assert.equal(r.exitCode, 1);
      assert.equal(r.stderr, "zwei – 🙂\n");
    },
  );
});

test("exec: an error line in the stream is thrown as its type", async () => {
  await withSandbox(
    (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ stream: "stdout", data: "a" }) + "\n");
      res.end(JSON.stringify(errorBody("sandbox_lost", "the sandbox stopped answering")) + "\n");
    },
    async (sbx, gw) => {
      await assert.rejects(sbx.exec("x", { onStdout: () => {} }), SandboxLostError);
      assert.equal(gw.seen.length, 2, "not retried");
    },
  );
});

test("exec: a stream that breaks before its result is a ConnectionError and is not retried", async () => {
  await withSandbox(
    (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ stream: "stdout", data: "a" }) + "\n");
      setTimeout(() => res.destroy(), 20);
    },
    async (sbx, gw) => {
      await assert.rejects(sbx.exec("x", { onStdout: () => {} }), ConnectionError);
      assert.equal(gw.seen.length, 2);
    },
  );
});

test("error answers map to their types with field, phase, reason and retry-after", async () => {
  const cases: [number, object, new (...args: any[]) => Error, (e: any) => void][] = [
    [401, errorBody("unauthenticated"), AuthenticationError, () => {}],
    [403, errorBody("forbidden"), PermissionDeniedError, (e) => assert.ok(e instanceof AuthenticationError)],
    [404, errorBody("not_found"), NotFoundError, () => {}],
    [400, errorBody("invalid_request", "env: bad", { field: "env" }), InvalidRequestError, (e) => assert.equal(e.field, "env")],
    [409, errorBody("sandbox_not_ready", "x", { phase: "expired", reason: "Expired" }), SandboxNotReadyError, (e) => {
      assert.equal(e.phase, "expired");
      assert.equal(e.reason, "Expired");
    }],
    [413, errorBody("too_large"), TooLargeError, () => {}],
    [429, errorBody("quota_exceeded"), QuotaExceededError, () => {}],
    [502, errorBody("sandbox_lost"), SandboxLostError, () => {}],
  ];
  for (const [status, body, type, check] of cases) {
    await withSandbox((_req, res) => send(res, status, body), async (sbx, gw) => {
      await assert.rejects(sbx.exec("true"), (err: any) => {
        assert.equal(err instanceof type, true, `${status}: got ${err?.constructor?.name}`);
        assert.equal(err.status, status);
        assert.equal(err.code, (body as any).error.code);
        check(err);
        return true;
      });
      assert.equal(gw.seen.length, 2, `${status} is not retried`);
    });
  }
});

test("429 rate limits and 503 are retried, honouring Retry-After; quota is not", async () => {
  let n = 0;
  await withSandbox(
    (_req, res) => {
      n++;
      if (n === 1) return send(res, 429, errorBody("too_many_concurrent_execs"), { "Retry-After": "1" });
      if (n === 2) return send(res, 503, errorBody("gateway_busy"), { "Retry-After": "0" });
      send(res, 200, execResult({ stdout: "ok" }));
    },
    async (sbx, gw) => {
      const start = Date.now();
      const r = await sbx.exec("echo ok");
      assert.equal(r.stdout, "ok");
      assert.equal(gw.seen.length, 4);
      assert.ok(Date.now() - start >= 1000, "waited the Retry-After second");
    },
  );
});

test("retries run out: the last error is thrown with its retry-after", async () => {
  const gw = await fakeGateway((_req, res) => send(res, 429, errorBody("rate_limited"), { "Retry-After": "0" }));
  try {
    await assert.rejects(Sandbox.create({ ...gw.conn, maxRetries: 2 }), (err: RateLimitedError) => {
      assert.ok(err instanceof RateLimitedError);
      assert.equal(err.retryAfter, 0);
      return true;
    });
    assert.equal(gw.seen.length, 3);
  } finally {
    await gw.close();
  }
});

test("exec is not retried on a 503 that is not the gateway's (it may have run)", async () => {
  await withSandbox(
    (_req, res) => {
      res.writeHead(503, { "Content-Type": "text/html" });
      res.end("<html>upstream unavailable</html>");
    },
    async (sbx, gw) => {
      await assert.rejects(sbx.exec("true"), ClusterUnavailableError);
      assert.equal(gw.seen.length, 2);
    },
  );
});

test("exec is retried when the connection is refused (it cannot have started)", async () => {
  // A port that was free a moment ago refuses; then the gateway comes up on it.
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const port = (probe.address() as { port: number }).port;
  await new Promise((r) => probe.close(r));
  const gw0 = await fakeGateway((_req, res) => send(res, 201, sandboxView("sbx-9")));
  const sbx = await Sandbox.create({ ...gw0.conn });
  await gw0.close();
  (sbx.transport as any).baseUrl = `http://127.0.0.1:${port}`;
  const late = createServer();
  setTimeout(() => {
    late.on("connection", (sock) => {
      sock.once("data", () => {
        const body = JSON.stringify(execResult({ stdout: "late" }));
        sock.end(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
      });
    });
    late.listen(port, "127.0.0.1");
  }, 200);
  try {
    assert.equal((await sbx.exec("true")).stdout, "late");
  } finally {
    await new Promise((r) => late.close(r));
  }
});

test("files: write sends the bytes, read checks the length", async () => {
  const files = new Map<string, Buffer>();
  await withSandbox(
    (req, res) => {
      const path = req.query.get("path") ?? "";
      if (req.method === "PUT") {
        assert.equal(req.headers["content-type"], "application/octet-stream");
        files.set(path, req.body);
        return send(res, 200, { path, bytes: req.body.length });
      }
      const data = files.get(path);
      if (!data) return send(res, 404, errorBody("not_found", "no", { field: "path" }));
      res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(path === "short" ? data.length + 10 : data.length) });
      res.end(data);
    },
    async (sbx) => {
      assert.deepEqual(await sbx.files.write("a.txt", "héllo"), { path: "a.txt", bytes: 6 });
      await sbx.files.write("/workspace/deep/er/b.bin", new Uint8Array([0, 255, 1]));
      assert.deepEqual([...(await sbx.files.read("/workspace/deep/er/b.bin"))], [0, 255, 1]);
      assert.equal(await sbx.files.readText("a.txt"), "héllo");
      await assert.rejects(sbx.files.read("missing"), (e: NotFoundError) => e instanceof NotFoundError && e.field === "path");
      // A transfer cut short of its Content-Length is an error, never a short file.
      files.set("short", Buffer.from("abc"));
      await assert.rejects(sbx.files.read("short"), ConnectionError);
    },
  );
});

test("files: list, exists and remove run as argv in the sandbox", async () => {
  await withSandbox(
    (req, res) => {
      const argv = req.json().argv as string[];
      if (argv[0] === "test") return send(res, 200, execResult({ exit_code: argv[2] === "there" ? 0 : 1 }));
      if (argv[0] === "rm") {
        assert.deepEqual(argv, ["rm", "-rf", "--", "old"]);
        return send(res, 200, execResult());
      }
      assert.equal(argv[0], "sh");
      if (argv[4] === "nope") return send(res, 200, execResult({ exit_code: 2 }));
      send(res, 200, execResult({ stdout: "f\t5\tb.txt\0d\t4096\tsub dir\0l\t3\ta-link\0" }));
    },
    async (sbx) => {
      assert.equal(await sbx.files.exists("there"), true);
      assert.equal(await sbx.files.exists("gone"), false);
      await sbx.files.remove("old");
      assert.deepEqual(await sbx.files.list("/workspace/"), [
        { name: "a-link", path: "/workspace/a-link", type: "symlink", size: 3 },
        { name: "b.txt", path: "/workspace/b.txt", type: "file", size: 5 },
        { name: "sub dir", path: "/workspace/sub dir", type: "directory", size: 4096 },
      ]);
      await assert.rejects(sbx.files.list("nope"), NotFoundError);
    },
  );
});

test("terminate is idempotent; await using deletes however the scope ends", async () => {
  let deletes = 0;
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST") return send(res, 201, sandboxView(`sbx-${gw.seen.length}`));
    if (req.method === "DELETE") {
      deletes++;
      // The second sandbox is gone already when deleted: still fine.
      return req.path.endsWith("sbx-3") ? send(res, 404, errorBody("not_found")) : send(res, 200, sandboxView("x", "terminating"));
    }
  });
  try {
    const sbx = await Sandbox.create(gw.conn);
    await sbx.terminate();
    await sbx.terminate();
    await sbx.kill();
    assert.equal(deletes, 1);
    await assert.rejects(
      (async () => {
        await using inner = await Sandbox.create(gw.conn);
        assert.equal(inner.id, "sbx-3");
        throw new Error("the tool loop failed");
      })(),
      /the tool loop failed/,
    );
    assert.equal(deletes, 2);
  } finally {
    await gw.close();
  }
});

test("exec: aborting the caller's signal ends a streamed call with the signal's reason", async () => {
  await withSandbox(
    (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ stream: "stdout", data: "working\n" }) + "\n");
    },
    async (sbx) => {
      const ctl = new AbortController();
      const reason = new Error("the user left");
      await assert.rejects(sbx.exec("sleep 100", { signal: ctl.signal, onStdout: () => ctl.abort(reason) }), (e) => e === reason);
    },
  );
});
