import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { Sandbox, formatObservation } from "@airlock-dev/sdk";
import { fakeGateway, sandboxView, send } from "./fake.js";

// The golden vectors shared by the three SDKs (docs/sdk.md, format_observation).
const dir = new URL("../../../testdata/observation/", import.meta.url);
const vectors = readdirSync(dir)
  .filter((f) => f.endsWith(".json"))
  .map((f) => JSON.parse(readFileSync(new URL(f, dir), "utf8")) as {
    name: string; result: Record<string, unknown>; options: { max_chars?: number }; expected: string;
  });

test("there are golden vectors", () => assert.ok(vectors.length >= 10, `only ${vectors.length} vectors in ${dir}`));

for (const v of vectors) {
  test(`golden ${v.name}: the gateway's JSON as is`, () => {
    assert.equal(formatObservation(v.result as any, { maxChars: v.options.max_chars }), v.expected);
  });
}

test("golden vectors: the SDK's exec result gives the same text as the gateway's JSON", async () => {
  const gw = await fakeGateway((req, res) => {
    if (req.method === "POST" && req.path === "/v1/sandboxes") return send(res, 201, sandboxView("sbx-1"));
    const name = req.json().command as string;
    send(res, 200, vectors.find((v) => v.name === name)!.result);
  });
  try {
    const sbx = await Sandbox.create(gw.conn);
    for (const v of vectors) {
      const r = await sbx.exec(v.name);
      assert.equal(formatObservation(r, { maxChars: v.options.max_chars }), v.expected, v.name);
    }
  } finally {
    await gw.close();
  }
});

test("the default budget is 4000 characters per stream", () => {
  const result = { exit_code: 0, duration_ms: 1, stdout: "x".repeat(4001), stderr: "y".repeat(4000) };
  const text = formatObservation(result);
  assert.match(text, /note: stdout was shortened to its last 4000 characters \(1 omitted\)/);
  assert.doesNotMatch(text, /stderr was shortened/);
});
