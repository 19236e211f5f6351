// The official MCP TypeScript client against the gateway's /mcp (run by test/e2e TestMCP with
// AIRLOCK_API_URL, AIRLOCK_API_KEY and AIRLOCK_OTHER_API_KEY, a key of another tenant).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.env.AIRLOCK_API_URL;
const key = process.env.AIRLOCK_API_KEY;
const otherKey = process.env.AIRLOCK_OTHER_API_KEY;
if (!base || !key || !otherKey) {
  throw new Error("set AIRLOCK_API_URL, AIRLOCK_API_KEY and AIRLOCK_OTHER_API_KEY (test/e2e TestMCP does)");
}

async function connect(apiKey) {
  const transport = new StreamableHTTPClientTransport(new URL(base + "/mcp"), {
    requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
  });
  const client = new Client({ name: "airlock-mcp-ts-test", version: "0" });
  await client.connect(transport);
  return { client, transport };
}

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

async function sandboxIds(apiKey) {
  const resp = await fetch(base + "/v1/sandboxes", { headers: { Authorization: `Bearer ${apiKey}` } });
  assert.equal(resp.status, 200);
  return (await resp.json()).sandboxes.filter((s) => s.status !== "terminating").map((s) => s.id);
}

test("no key is 401", async () => {
  const resp = await fetch(base + "/mcp", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(resp.status, 401);
});

test("a session: tools, the KeyError fix loop, files, another tenant, the end deletes the sandbox", async (t) => {
  const { client, transport } = await connect(key);
  // A failed assertion must not leave the session's stream open: node would not exit.
  t.after(() => client.close());
  assert.ok(transport.sessionId, "the session has an id");

  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const name of ["run_command", "run_python", "write_file", "read_file", "list_files", "create_sandbox", "delete_sandbox"]) {
    assert.ok(byName[name], `tool ${name}`);
  }
  assert.equal(byName.list_files.annotations.readOnlyHint, true);
  assert.equal(byName.run_command.annotations.destructiveHint, true);

  let res = await client.callTool({ name: "run_python", arguments: { code: "d = {}\nprint(d['missing'])\n" } });
  assert.match(text(res), /^exit_code: 1\n/);
  assert.match(text(res), /KeyError: 'missing'/);
  const id = res.structuredContent.sandbox_id;
  assert.ok(id);
  res = await client.callTool({ name: "run_python", arguments: { code: "d = {}\nprint(d.get('missing', 'default'))\n" } });
  assert.match(text(res), /^exit_code: 0\n/);
  assert.equal(res.structuredContent.stdout, "default\n");
  assert.equal(res.structuredContent.sandbox_id, id);

  res = await client.callTool({ name: "write_file", arguments: { path: "hello.txt", content: "héllo\n" } });
  assert.ok(!res.isError);
  res = await client.callTool({ name: "read_file", arguments: { path: "hello.txt" } });
  assert.equal(res.structuredContent.content, "héllo\n");
  res = await client.callTool({ name: "list_files", arguments: {} });
  assert.ok(res.structuredContent.entries.some((e) => e.name === "hello.txt"));

  const other = await connect(otherKey);
  try {
    res = await other.client.callTool({ name: "read_file", arguments: { path: "hello.txt", sandbox_id: id } });
    assert.equal(res.isError, true);
    assert.match(text(res), /not found/);
  } finally {
    await other.client.close();
  }

  assert.ok((await sandboxIds(key)).includes(id));
  await transport.terminateSession();
  await client.close();
  for (let i = 0; i < 60 && (await sandboxIds(key)).includes(id); i++) {
    await new Promise((r) => setTimeout(r, 1000));
  }
  assert.ok(!(await sandboxIds(key)).includes(id), "the session's end deleted its sandbox");
});
