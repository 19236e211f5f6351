// The Anthropic Messages tool loop: the model writes and runs code in one sandbox per conversation.
//   AIRLOCK_API_URL=... AIRLOCK_API_KEY=... ANTHROPIC_API_KEY=... node build/anthropic-loop.js "What is the 1000th prime?"
import Anthropic from "@anthropic-ai/sdk";
import { Sandbox } from "@airlock-dev/sdk";
import { pathToFileURL } from "node:url";

export async function solve(task: string, client = new Anthropic(), model = "claude-sonnet-4-5", maxTurns = 20): Promise<string> {
  const sbx = await Sandbox.create();
  try {
    // The gateway describes the tools for this sandbox's template: what is installed, its network.
    const tools = await sbx.tools("anthropic");
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: task }];
    for (let turn = 0; turn < maxTurns; turn++) {
      const msg = await client.messages.create({ model, max_tokens: 4096, tools, messages });
      messages.push({ role: "assistant", content: msg.content });
      if (msg.stop_reason !== "tool_use") {
        return msg.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
      }
      const results: Anthropic.ToolResultBlockParam[] = [];
      for (const block of msg.content) {
        if (block.type === "tool_use") {
          results.push({ type: "tool_result", tool_use_id: block.id, content: await sbx.runTool(block.name, block.input as Record<string, unknown>) });
        }
      }
      messages.push({ role: "user", content: results });
    }
    throw new Error(`no answer after ${maxTurns} turns`);
  } finally {
    await sbx.terminate();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await solve(process.argv[2] ?? "What is the 1000th prime? Compute it."));
}
