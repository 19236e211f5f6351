// The three loops with the official clients against the scripted model server (test/model-server.ts) and the
// real gateway: test/e2e (TestSDKTypeScript) runs them with AIRLOCK_API_URL and AIRLOCK_API_KEY set.
import assert from "node:assert/strict";
import { test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { Sandbox } from "@airlock-dev/sdk";
import { solve as anthropicLoop } from "../anthropic-loop.js";
import { solve as openaiLoop } from "../openai-loop.js";
import { solve as vercelLoop } from "../vercel-ai.js";
import { answer, startModelServer, tracebackLine } from "./model-server.js";

for (const name of ["AIRLOCK_API_URL", "AIRLOCK_API_KEY"]) {
  if (!process.env[name]) throw new Error(`${name} is not set: run these through test/e2e (TestSDKTypeScript)`);
}

const task = "What is the 1000th prime? Compute it in the sandbox.";

/** Runs one conversation and checks what the model was sent: the traceback, the exit codes, the fix's output. */
async function conversation(run: (modelURL: string) => Promise<string>) {
  const before = new Set((await Sandbox.list()).map((s) => s.id));
  const model = await startModelServer();
  try {
    const text = await run(model.url);
    assert.deepEqual(model.refusals, []);
    assert.match(text, /\b7919\b/);
    assert.equal(text, answer);
    assert.equal(model.toolResults.length, 2, "two tool results: the traceback, then the answer");
    const [failed, fixed] = model.toolResults.map((r) => r.content);
    assert.match(failed!, /^exit_code: 1\n/);
    assert.ok(failed!.includes(tracebackLine), `the traceback is in the tool result:\n${failed}`);
    assert.match(failed!, /line 10, in <module>\n {4}print\(primes\(1000\)\[1000\]\)/);
    assert.match(fixed!, /^exit_code: 0\n/);
    assert.match(fixed!, /stdout:\n7919$/);
    // Three model calls, each offered both tools.
    assert.equal(model.requests.length, 3);
    for (const r of model.requests) assert.match(JSON.stringify(r.body.tools), /"run_command".*"run_python"/);
  } finally {
    await model.close();
  }
  // One sandbox per conversation, deleted when it ended (the gateway's cache may lag the delete a moment).
  for (let i = 0; ; i++) {
    const left = (await Sandbox.list()).filter((s) => !before.has(s.id) && s.status !== "terminating");
    if (left.length === 0) break;
    assert.ok(i < 50, `the conversation's sandbox was not deleted: ${JSON.stringify(left)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("Anthropic Messages loop with @anthropic-ai/sdk", () =>
  conversation((url) => anthropicLoop(task, new Anthropic({ baseURL: url, apiKey: "sk-ant-test" }), "claude-test")));

test("OpenAI Chat Completions loop with openai", () =>
  conversation((url) => openaiLoop(task, new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test" }), "gpt-test")));

test("Vercel AI SDK generateText with @ai-sdk/anthropic and a step limit", () =>
  conversation((url) => vercelLoop(task, createAnthropic({ baseURL: `${url}/v1`, apiKey: "sk-ant-test" })("claude-test"))));
