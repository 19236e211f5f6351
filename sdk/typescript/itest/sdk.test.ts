// Integration tests against the real gateway and sandboxes: test/e2e (TestSDKTypeScript) runs them with
// AIRLOCK_API_URL and AIRLOCK_API_KEY set, and AIRLOCK_QUOTA_API_KEY for a tenant limited to 2 sandboxes.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  AuthenticationError,
  ExecTimeout,
  InvalidRequestError,
  NotFoundError,
  QuotaExceededError,
  Sandbox,
  SandboxNotReadyError,
  anthropicTools,
  fetchTools,
  formatObservation,
  openaiTools,
} from "@airlock-dev/sdk";

for (const name of ["AIRLOCK_API_URL", "AIRLOCK_API_KEY", "AIRLOCK_QUOTA_API_KEY"]) {
  // An integration test that skips proves nothing: fail instead.
  if (!process.env[name]) throw new Error(`${name} is not set: run these through test/e2e (TestSDKTypeScript)`);
}

const created: string[] = [];
async function create(options: Parameters<typeof Sandbox.create>[0] = {}) {
  const sbx = await Sandbox.create({ timeoutMinutes: 10, ...options });
  created.push(sbx.id);
  return sbx;
}

after(async () => {
  // Every test deletes what it made; this only reports what one left behind (test/e2e also checks the cluster).
  // The gateway's cache may lag a delete a moment.
  for (let i = 0; ; i++) {
    const left = (await Sandbox.list()).filter((s) => created.includes(s.id) && s.status !== "terminating");
    if (left.length === 0) break;
    assert.ok(i < 50, `sandboxes left running: ${left.map((s) => s.id)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});

test("create, info, list, exec, setTimeout", async () => {
  const sbx = await create({ size: "small", env: { GREETING: "hej" }, metadata: { conversation: "c-42" } });
  try {
    const info = await sbx.info();
    assert.equal(info.status, "ready");
    assert.equal(info.workingDir, "/home/sandbox");
    assert.deepEqual(info.metadata, { conversation: "c-42" });
    assert.ok((await Sandbox.list()).some((s) => s.id === sbx.id));
    const again = await Sandbox.connect(sbx.id);
    const r = await again.exec('echo "$GREETING $X from $(pwd)"; echo oops >&2; exit 7', { env: { X: "y" } });
    assert.equal(r.exitCode, 7);
    assert.equal(r.outcome, "exited");
    assert.equal(r.stdout, "hej y from /home/sandbox\n");
    assert.equal(r.stderr, "oops\n");
    assert.ok(r.durationMs >= 0);
    const argv = await sbx.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], { stdin: "piped", cwd: "/tmp" });
    assert.equal(argv.stdout, "PIPED\n");
    assert.equal((await sbx.setTimeout(20)).timeoutMinutes, 20);
    const big = await sbx.exec("head -c 200000 /dev/zero | tr '\\0' x", { maxOutputBytes: 1024 });
    assert.equal(big.truncated, true);
    assert.equal(big.truncation.stdout.truncated, true);
    assert.ok(big.truncation.stdout.fullOutputPath, "the full output's file is named");
    assert.match(formatObservation(big), /note: the sandbox cut stdout: \d+ bytes omitted; the full stdout is in \//);
  } finally {
    await sbx.terminate();
  }
});

test("exec streams output to the callbacks as it arrives", async () => {
  await using sbx = await create();
  const got: { stream: string; data: string; at: number }[] = [];
  const start = Date.now();
  const r = await sbx.exec("echo first; sleep 2; echo second >&2; echo third", {
    onStdout: (data) => void got.push({ stream: "stdout", data, at: Date.now() - start }),
    onStderr: (data) => void got.push({ stream: "stderr", data, at: Date.now() - start }),
  });
  const end = Date.now() - start;
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "first\nthird\n");
  assert.equal(r.stderr, "second\n");
  assert.equal(got.filter((c) => c.stream === "stdout").map((c) => c.data).join(""), "first\nthird\n");
  assert.equal(got.filter((c) => c.stream === "stderr").map((c) => c.data).join(""), "second\n");
  // "first" came before the sleep was over, not with the result.
  assert.ok(got[0]!.data.startsWith("first") && end - got[0]!.at >= 1500, `first chunk at ${got[0]!.at} ms, result at ${end} ms`);
});

test("a timeout is a result (exit code 124, partial output); ExecTimeout when asked", async () => {
  await using sbx = await create();
  const r = await sbx.exec("echo started; sleep 30", { timeoutSeconds: 1 });
  assert.equal(r.outcome, "timeout");
  assert.equal(r.exitCode, 124);
  assert.equal(r.stdout, "started\n");
  assert.match(formatObservation(r), /^exit_code: 124\nduration_ms: \d+\noutcome: timeout \(/);
  await assert.rejects(sbx.exec("echo partial; sleep 30", { timeoutSeconds: 1, throwOnTimeout: true }), (err: ExecTimeout) => {
    assert.ok(err instanceof ExecTimeout);
    assert.equal(err.result.stdout, "partial\n");
    return true;
  });
  // The sandbox is fine afterwards.
  assert.equal((await sbx.exec("echo alive")).stdout, "alive\n");
});

test("files: relative and absolute paths, /workspace, bytes, list, exists, remove", async () => {
  await using sbx = await create();
  const data = new Uint8Array(1000).map((_, i) => i % 256);
  await sbx.files.write("/workspace/a/b/data.bin", data);
  assert.deepEqual(await sbx.files.read("/home/sandbox/a/b/data.bin"), data);
  assert.deepEqual(await sbx.files.read("a/b/data.bin"), data);
  await sbx.files.write("notes.txt", "grüße 🙂\n");
  assert.equal(await sbx.files.readText("/workspace/notes.txt"), "grüße 🙂\n");
  await sbx.files.write("/tmp/elsewhere.txt", "outside the working directory");
  assert.equal((await sbx.exec("cat /tmp/elsewhere.txt")).stdout, "outside the working directory");

  const entries = await sbx.files.list("/workspace/a/b");
  assert.deepEqual(entries, [{ name: "data.bin", path: "/workspace/a/b/data.bin", type: "file", size: 1000 }]);
  assert.ok((await sbx.files.list()).some((e) => e.name === "a" && e.type === "directory"));
  await assert.rejects(sbx.files.list("no/such/dir"), NotFoundError);

  assert.equal(await sbx.files.exists("a/b/data.bin"), true);
  await sbx.files.remove("a");
  assert.equal(await sbx.files.exists("a/b/data.bin"), false);
  await sbx.files.remove("a");
  await assert.rejects(sbx.files.read("a/b/data.bin"), (e: NotFoundError) => e instanceof NotFoundError && e.field === "path");
});

test("errors: not found, authentication, invalid request with its field, not ready after terminate", async () => {
  await assert.rejects(Sandbox.connect("sbx-does-not-exist"), NotFoundError);
  await assert.rejects(Sandbox.list({ apiKey: "alk_nope_nope" }), AuthenticationError);
  await assert.rejects(create({ size: "enormous" }), (e: InvalidRequestError) => e instanceof InvalidRequestError && e.field === "size");
  const sbx = await create();
  await assert.rejects(sbx.exec("true", { timeoutSeconds: 100 * 3600 }), (e: InvalidRequestError) => e instanceof InvalidRequestError && e.field === "timeout_ms");
  await sbx.terminate();
  await sbx.terminate();
  // The gateway's cache may show it ready for a moment after the delete; then it is terminating, then gone.
  for (let i = 0; ; i++) {
    try {
      await sbx.exec("true");
    } catch (e) {
      assert.ok(e instanceof SandboxNotReadyError || e instanceof NotFoundError, `got ${e}`);
      if (e instanceof SandboxNotReadyError) assert.equal(e.phase, "terminating");
      break;
    }
    assert.ok(i < 50, "exec still ran 5 s after terminate");
    await new Promise((r) => setTimeout(r, 100));
  }
});

test("quota: a tenant at its limit gets QuotaExceededError, not a retry loop", async () => {
  const apiKey = process.env.AIRLOCK_QUOTA_API_KEY!;
  const results = await Promise.allSettled([0, 1, 2].map(() => Sandbox.create({ apiKey, timeoutMinutes: 10 })));
  const made = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  try {
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    assert.ok(made.length <= 2, `${made.length} sandboxes in a tenant limited to 2`);
    assert.ok(refused.length >= 1 && refused.every((e) => e instanceof QuotaExceededError), `refusals: ${refused}`);
  } finally {
    await Promise.all(made.map((s) => s.terminate()));
  }
});

test("await using deletes the sandbox however the scope ends", async () => {
  let id = "";
  await assert.rejects(
    (async () => {
      await using sbx = await create();
      id = sbx.id;
      throw new Error("the agent loop failed");
    })(),
    /the agent loop failed/,
  );
  for (let i = 0; ; i++) {
    const gone = await Sandbox.connect(id).then((s) => s.info()).catch((e) => e);
    if (gone instanceof NotFoundError || gone.status === "terminating") break;
    assert.ok(i < 50, `after await using: ${JSON.stringify(gone)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});

test("the gateway's tool definitions are the SDK's for the same template", async () => {
  const installed = process.env.AIRLOCK_TEST_INSTALLED;
  assert.ok(installed, "AIRLOCK_TEST_INSTALLED (the template's sandbox.airlock.dev/installed) is not set");
  const ctx = { installed, network: "none" };
  assert.deepEqual(await fetchTools({ format: "anthropic", template: "python-node" }), anthropicTools(ctx));
  assert.deepEqual(await fetchTools({ format: "openai" }), openaiTools(ctx));
  await using sbx = await create();
  assert.deepEqual(await sbx.tools("anthropic"), anthropicTools(ctx));
  const obs = await sbx.runTool("run_python", { code: "primes = [2, 3]\nprint(primes[5])\n" });
  assert.match(obs, /^exit_code: 1\n/);
  assert.match(obs, /IndexError: list index out of range/);
  assert.match(obs, /line 2, in <module>\n {4}print\(primes\[5\]\)/);
  assert.match(await sbx.runTool("run_command", { command: "sleep 5", timeout_ms: 1000 }), /^exit_code: 124\n.*\noutcome: timeout/s);
});
