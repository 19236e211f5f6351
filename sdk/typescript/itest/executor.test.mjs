// The tool executor of issue 10 in its plain JavaScript form, as it is written for other sandbox SDKs of this
// shape: only the import names Airlock. Plain .mjs on purpose: no TypeScript between it and the package.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "@airlock-dev/sdk";

test("the run_python tool executor runs unchanged on the default template", async () => {
  const sbx = await Sandbox.create({ template: "python-node", network: "restricted" });
  async function run_python(code) {
    await sbx.files.write("/workspace/tool_call.py", code);
    const r = await sbx.exec("python /workspace/tool_call.py", { timeoutSeconds: 60 });
    return `exit_code: ${r.exitCode}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
  }
  try {
    assert.equal(await run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n"), "exit_code: 3\nstdout:\nout\n\nstderr:\nerr\n");
    const traceback = await run_python("d = {}\nprint(d['x'])\n");
    assert.match(traceback, /^exit_code: 1\n/);
    assert.match(traceback, /File "\/workspace\/tool_call.py", line 2/);
    assert.match(traceback, /KeyError: 'x'/);
    // /workspace is the working directory: the same file, on the same disk.
    assert.equal(await sbx.files.readText("tool_call.py"), "d = {}\nprint(d['x'])\n");
    assert.equal((await sbx.info()).network, "restricted");
  } finally {
    await sbx.terminate();
  }
});
