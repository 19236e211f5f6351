// The OpenAI Chat Completions tool loop: the model writes and runs code in one sandbox per conversation.
//   AIRLOCK_API_URL=... AIRLOCK_API_KEY=... OPENAI_API_KEY=... node build/openai-loop.js "What is the 1000th prime?"
import OpenAI from "openai";
import { Sandbox } from "@airlock-dev/sdk";
import { pathToFileURL } from "node:url";

export async function solve(task: string, client = new OpenAI(), model = "gpt-4.1", maxTurns = 20): Promise<string> {
  const sbx = await Sandbox.create();
  try {
    const tools = await sbx.tools("openai");
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: task }];
    for (let turn = 0; turn < maxTurns; turn++) {
      const completion = await client.chat.completions.create({ model, messages, tools });
      const message = completion.choices[0]!.message;
      messages.push(message);
      if (!message.tool_calls?.length) return message.content ?? "";
      for (const call of message.tool_calls) {
        if (call.type !== "function") continue;
        const content = await sbx.runTool(call.function.name, JSON.parse(call.function.arguments));
        messages.push({ role: "tool", tool_call_id: call.id, content });
      }
    }
    throw new Error(`no answer after ${maxTurns} turns`);
  } finally {
    await sbx.terminate();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await solve(process.argv[2] ?? "What is the 1000th prime? Compute it."));
}
