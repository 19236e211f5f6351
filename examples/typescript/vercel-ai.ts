// The Vercel AI SDK: generateText with Airlock's tools and a step limit, one sandbox per conversation.
//   AIRLOCK_API_URL=... AIRLOCK_API_KEY=... ANTHROPIC_API_KEY=... node build/vercel-ai.js "What is the 1000th prime?"
import { createAnthropic } from "@ai-sdk/anthropic";
import { generateText, jsonSchema, stepCountIs, type LanguageModel } from "ai";
import { Sandbox, vercelTools } from "@airlock-dev/sdk";
import { pathToFileURL } from "node:url";

export async function solve(task: string, model: LanguageModel = createAnthropic()("claude-sonnet-4-5"), maxSteps = 10): Promise<string> {
  const sbx = await Sandbox.create();
  try {
    const { network } = await sbx.info();
    const { text } = await generateText({
      model,
      tools: vercelTools(sbx, jsonSchema, { network }),
      stopWhen: stepCountIs(maxSteps),
      maxOutputTokens: 4096,
      prompt: task,
    });
    return text;
  } finally {
    await sbx.terminate();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await solve(process.argv[2] ?? "What is the 1000th prime? Compute it."));
}
