import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidRequestError, Sandbox, anthropicTools, openaiTools, vercelTools } from "@airlock-dev/sdk";
import { execResult, fakeGateway, sandboxView, send } from "./fake.js";

test("run_command and run_python in the Anthropic and OpenAI forms", () => {
  const a = anthropicTools({ network: "none", installed: "Python 3.11, Node.js 20" });
  assert.deepEqual(a.map((t) => t.name), ["run_command", "run_python"]);
  assert.deepEqual((a[0]!.input_schema as any).required, ["command"]);
  assert.equal((a[0]!.input_schema as any).properties.timeout_ms.type, "integer");
  assert.deepEqual((a[1]!.input_schema as any).required, ["code"]);
  for (const phrase of ["persist", "/home/sandbox", "Stdin is closed", "60000", "no network access", "Installed: Python 3.11, Node.js 20."]) {
    assert.ok(a[0]!.description.includes(phrase), `run_command description lacks ${phrase}: ${a[0]!.description}`);
  }
  assert.ok(!anthropicTools()[0]!.description.includes("network"), "an unknown network mode is not described");
  assert.match(anthropicTools({ defaultTimeoutMs: 5000 })[1]!.description, /time limit 5000 ms/);
  const o = openaiTools();
  assert.equal(o[1]!.type, "function");
  assert.equal(o[1]!.function.name, "run_python");
  assert.deepEqual(o[1]!.function.parameters, anthropicTools()[1]!.input_schema);
});

test("runTool runs the call and answers with the observation; bad input gets a message, unknown tools throw", async () => {
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST" && req.path === "/v1/sandboxes") return send(res, 201, sandboxView("sbx-1"));
    const body = req.json();
    if (body.command) return send(res, 200, execResult({ stdout: "hi\n", duration_ms: 3 }));
    assert.equal(body.stdin, "print('hi')");
    assert.equal(body.argv[0], "sh");
    assert.match(body.argv[4], /^\.airlock\/run_python\/\w+\.py$/);
    send(res, 200, execResult({ exit_code: 1, stderr: "Traceback...\nNameError: x\n", duration_ms: 4 }));
  });
  try {
    const sbx = await Sandbox.create(gw.conn);
    assert.equal(await sbx.runTool("run_command", { command: "echo hi", timeout_ms: 5000 }), "exit_code: 0\nduration_ms: 3\nstderr: (empty)\nstdout:\nhi");
    assert.equal(gw.seen[1]!.json().timeout_ms, 5000);
    assert.equal(await sbx.runTool("run_python", { code: "print('hi')" }),
      "exit_code: 1\nduration_ms: 4\nstderr:\nTraceback...\nNameError: x\nstdout: (empty)");
    assert.match(await sbx.runTool("run_command", { cmd: "ls" }), /needs a string "command"/);
    await assert.rejects(sbx.runTool("rm_rf", {}), InvalidRequestError);
    const v = vercelTools(sbx, (schema) => ({ wrapped: schema }));
    assert.deepEqual(v.run_python.inputSchema, { wrapped: anthropicTools()[1]!.input_schema });
    assert.match(await v.run_command.execute({ command: "echo hi" }), /^exit_code: 0/);
  } finally {
    await gw.close();
  }
});
