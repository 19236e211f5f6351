// A scripted model behind the Anthropic Messages and OpenAI Chat Completions wire formats, for the examples'
// tests: the official clients talk to it through their baseURL options. It plays one conversation: write a
// program with a bug, read the traceback from the tool result, fix it, answer with the result. It checks what
// a real API would refuse (a missing key or field, a tool result for a call it never made) and records every
// request so the test can assert on what the loops sent.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** The buggy program: primes[1000] is one past the end of 1000 primes. */
export const buggyProgram = `def primes(n):
    found = []
    k = 2
    while len(found) < n:
        if all(k % p for p in found):
            found.append(k)
        k += 1
    return found

print(primes(1000)[1000])
`;
export const fixedProgram = buggyProgram.replace("[1000])", "[999])");
export const tracebackLine = "IndexError: list index out of range";
export const answer = "The 1000th prime is 7919.";

/** What a loop sent back for one tool call. */
export interface ToolResultSeen {
  api: "anthropic" | "openai";
  toolCallId: string;
  content: string;
}

class Refusal extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

function need(cond: unknown, message: string): asserts cond {
  if (!cond) throw new Refusal(400, message);
}

/**
 * The script's next move, from the tool results so far: the first call runs the buggy program; after a
 * traceback it runs the fixed one; after a result with 7919 it answers. Anything else is a failed script.
 */
function nextMove(results: string[]): { code: string } | { text: string } {
  if (results.length === 0) return { code: buggyProgram };
  const last = results[results.length - 1]!;
  if (results.length === 1 && last.includes(tracebackLine)) return { code: fixedProgram };
  if (results.length === 2 && /\b7919\b/.test(last)) return { text: answer };
  throw new Refusal(400, `the script cannot go on from tool result ${results.length}: ${last}`);
}

const textOf = (content: unknown): string =>
  typeof content === "string" ? content : Array.isArray(content) ? content.map((b) => (b?.type === "text" ? b.text : "")).join("") : "";

/** One server per conversation: it counts the tool results it has seen. */
export async function startModelServer() {
  const requests: { api: "anthropic" | "openai"; body: any }[] = [];
  const refusals: string[] = [];
  const toolResults: ToolResultSeen[] = [];
  let ids = 0;

  function anthropic(req: IncomingMessage, body: any) {
    // Older clients send the key as x-api-key, @anthropic-ai/sdk 1.x as a bearer token.
    need(req.headers["x-api-key"] || String(req.headers.authorization).startsWith("Bearer "), "no API key (x-api-key or Authorization)");
    need(req.headers["anthropic-version"], "anthropic-version header missing");
    need(typeof body.model === "string" && Number.isInteger(body.max_tokens), "model and max_tokens are required");
    need(body.stream !== true, "this scripted model does not stream");
    need(Array.isArray(body.tools) && body.tools.some((t: any) => t.name === "run_python" && t.input_schema?.type === "object"),
      "tools must include run_python with an input_schema");
    const offered = new Set<string>();
    const results: string[] = [];
    for (const m of body.messages) {
      need(m.role === "user" || m.role === "assistant", `bad role ${m.role}`);
      for (const block of Array.isArray(m.content) ? m.content : []) {
        if (block.type === "tool_use") offered.add(block.id);
        if (block.type === "tool_result") {
          need(m.role === "user" && offered.has(block.tool_use_id), `tool_result for unknown tool_use_id ${block.tool_use_id}`);
          results.push(textOf(block.content));
        }
      }
    }
    if (results.length > toolResults.length) {
      const last = body.messages[body.messages.length - 1];
      const block = last.content.find((b: any) => b.type === "tool_result");
      toolResults.push({ api: "anthropic", toolCallId: block.tool_use_id, content: results[results.length - 1]! });
    }
    const move = nextMove(results);
    const content = "code" in move
      ? [{ type: "text", text: "Let me run that." }, { type: "tool_use", id: `toolu_${++ids}`, name: "run_python", input: { code: move.code } }]
      : [{ type: "text", text: move.text }];
    return {
      id: `msg_${++ids}`, type: "message", role: "assistant", model: body.model, content,
      stop_reason: "code" in move ? "tool_use" : "end_turn", stop_sequence: null,
      usage: { input_tokens: 100, output_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    };
  }

  function openai(req: IncomingMessage, body: any) {
    need(String(req.headers.authorization).startsWith("Bearer "), "Authorization: Bearer missing");
    need(typeof body.model === "string" && Array.isArray(body.messages), "model and messages are required");
    need(Array.isArray(body.tools) && body.tools.some((t: any) => t.type === "function" && t.function?.name === "run_python" && t.function.parameters),
      "tools must include the function run_python with parameters");
    const offered = new Set<string>();
    const results: string[] = [];
    for (const m of body.messages) {
      for (const call of m.role === "assistant" ? m.tool_calls ?? [] : []) offered.add(call.id);
      if (m.role === "tool") {
        need(offered.has(m.tool_call_id), `tool message for unknown tool_call_id ${m.tool_call_id}`);
        results.push(textOf(m.content));
      }
    }
    if (results.length > toolResults.length) {
      const last = body.messages[body.messages.length - 1];
      toolResults.push({ api: "openai", toolCallId: last.tool_call_id, content: results[results.length - 1]! });
    }
    const move = nextMove(results);
    const message = "code" in move
      ? { role: "assistant", content: null, refusal: null, tool_calls: [{ id: `call_${++ids}`, type: "function", function: { name: "run_python", arguments: JSON.stringify({ code: move.code }) } }] }
      : { role: "assistant", content: move.text, refusal: null };
    return {
      id: `chatcmpl-${++ids}`, object: "chat.completion", created: Math.floor(Date.now() / 1000), model: body.model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: "code" in move ? "tool_calls" : "stop" }],
      usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 },
    };
  }

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let out: unknown;
    let status = 200;
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString() || "{}");
      if (req.method === "POST" && req.url === "/v1/messages") {
        requests.push({ api: "anthropic", body });
        out = anthropic(req, body);
      } else if (req.method === "POST" && req.url === "/v1/chat/completions") {
        requests.push({ api: "openai", body });
        out = openai(req, body);
      } else {
        throw new Refusal(404, `no route ${req.method} ${req.url}`);
      }
    } catch (err) {
      status = err instanceof Refusal ? err.status : 500;
      refusals.push((err as Error).message);
      // Both APIs answer errors as {"error": {"type"/"code", "message"}}; the clients show the message.
      out = { type: "error", error: { type: "invalid_request_error", message: (err as Error).message } };
    }
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(out));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    requests,
    toolResults,
    refusals,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}
