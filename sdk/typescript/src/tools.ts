import { InvalidRequestError } from "./errors.js";
import { Transport, type ConnectionOptions } from "./http.js";
import { formatObservation, type ObservationOptions } from "./observation.js";
import type { Sandbox } from "./sandbox.js";

/** What the tool descriptions say about the sandbox; what is not known is left out rather than guessed. */
export interface ToolContext {
  /** What the template has installed, e.g. "Python 3.11 with pip, Node.js 20, git". */
  installed?: string;
  /** `none` or `restricted`. */
  network?: string;
  /** Default `/home/sandbox`. */
  workingDir?: string;
}

/** A tool as a name, a description and the JSON Schema of its input. */
export interface ToolDefinition {
  name: "run_command" | "run_python";
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

export interface OpenAITool {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

/** The input a model sends: `{command, timeout_ms?}` for run_command, `{code}` for run_python. */
export type ToolInput = Record<string, unknown>;

const defaultTimeoutMs = 60_000;

function environment(ctx: ToolContext): string {
  const wd = ctx.workingDir ?? "/home/sandbox";
  const parts = [
    `It runs in this conversation's own Linux sandbox; files and installed packages persist between calls for the rest of the conversation.`,
    `The working directory is ${wd}${wd === "/home/sandbox" ? " (also reachable as /workspace)" : ""}.`,
    `stdin is closed, so interactive commands (prompts, editors, REPLs) get no input and run until they time out.`,
  ];
  if (ctx.installed) parts.push(`Installed: ${ctx.installed}.`);
  if (ctx.network === "none") parts.push("There is no network access.");
  if (ctx.network === "restricted") parts.push("Network access is restricted to the destinations the operator allowed.");
  parts.push("The result shows the exit code, stderr and then stdout; long output keeps its end.");
  return parts.join(" ");
}

/** run_command and run_python, neutral form; the provider forms below are made from these. */
export function toolDefinitions(ctx: ToolContext = {}): ToolDefinition[] {
  const env = environment(ctx);
  return [
    {
      name: "run_command",
      description: `Run one shell command (/bin/sh -c) and return its exit code and output. ${env} ` +
        `It is killed after timeout_ms (default ${defaultTimeoutMs}).`,
      inputSchema: {
        type: "object",
        properties: {
          command: { type: "string", description: "The shell command, e.g. `pip install numpy` or `ls -la`." },
          timeout_ms: { type: "integer", description: `Kill the command after this many milliseconds; default ${defaultTimeoutMs}.`, minimum: 1 },
        },
        required: ["command"],
        additionalProperties: false,
      },
    },
    {
      name: "run_python",
      description: `Run a Python 3 program and return its exit code and output; print what you want to see. ${env} ` +
        `It is killed after ${defaultTimeoutMs / 1000} seconds.`,
      inputSchema: {
        type: "object",
        properties: { code: { type: "string", description: "The whole program, as a file's contents." } },
        required: ["code"],
        additionalProperties: false,
      },
    },
  ];
}

/** The tools for the Anthropic Messages API (`tools: anthropicTools()`). */
export function anthropicTools(ctx?: ToolContext): AnthropicTool[] {
  return toolDefinitions(ctx).map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }));
}

/** The tools for OpenAI Chat Completions (`tools: openaiTools()`). */
export function openaiTools(ctx?: ToolContext): OpenAITool[] {
  return toolDefinitions(ctx).map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.inputSchema },
  }));
}

/**
 * A tool of the Vercel AI SDK (5 or later) without depending on it: `inputSchema` is the SDK's JSON Schema
 * form, what its `jsonSchema()` makes, recognised by the symbol it registers globally.
 */
export interface VercelTool {
  description: string;
  inputSchema: { jsonSchema: Record<string, unknown>; validate: (value: unknown) => { success: true; value: ToolInput } | { success: false; error: Error } };
  execute: (input: ToolInput) => Promise<string>;
}

/** The tools for the Vercel AI SDK's `generateText`/`streamText` (`tools: vercelTools(sbx)`), run in `sbx`. */
export function vercelTools(sbx: Sandbox, ctx?: ToolContext, options?: ObservationOptions): Record<string, VercelTool> {
  const out: Record<string, VercelTool> = {};
  for (const t of toolDefinitions(ctx)) {
    const required = t.inputSchema.required as string[];
    out[t.name] = {
      description: t.description,
      inputSchema: {
        [Symbol.for("vercel.ai.schema")]: true,
        jsonSchema: t.inputSchema,
        validate: (value) =>
          typeof value === "object" && value !== null && required.every((k) => typeof (value as ToolInput)[k] === "string")
            ? { success: true, value: value as ToolInput }
            : { success: false, error: new Error(`${t.name} needs ${required.map((k) => `a string "${k}"`).join(" and ")}`) },
      } as VercelTool["inputSchema"],
      execute: (input) => runTool(sbx, t.name, input, options),
    };
  }
  return out;
}

export interface FetchToolsOptions extends ConnectionOptions {
  /** The template the descriptions describe; default the gateway's default template. */
  template?: string;
  format: "anthropic" | "openai";
}

/**
 * The tool definitions from the gateway (`GET /v1/tools`), whose descriptions are read from the template
 * (what is installed, its network), in the provider's form.
 */
export async function fetchTools(options: FetchToolsOptions & { format: "anthropic" }): Promise<AnthropicTool[]>;
export async function fetchTools(options: FetchToolsOptions & { format: "openai" }): Promise<OpenAITool[]>;
export async function fetchTools(options: FetchToolsOptions): Promise<AnthropicTool[] | OpenAITool[]> {
  const query: Record<string, string> = { format: options.format };
  if (options.template) query.template = options.template;
  const out = await new Transport(options).json<{ tools: AnthropicTool[] | OpenAITool[] }>({
    method: "GET", path: "/v1/tools", query, idempotent: true, timeoutMs: 30_000,
  });
  return out.tools;
}

/**
 * Runs one tool call in the sandbox and returns the observation for the model (`formatObservation`). Input the
 * model got wrong is answered with a message it can act on; an unknown tool name is the caller's bug and throws.
 */
export async function runTool(sbx: Sandbox, name: string, input: ToolInput, options?: ObservationOptions): Promise<string> {
  switch (name) {
    case "run_command": {
      if (typeof input?.command !== "string") return 'error: run_command needs a string "command"';
      const ms = typeof input.timeout_ms === "number" && input.timeout_ms > 0 ? input.timeout_ms : defaultTimeoutMs;
      return formatObservation(await sbx.exec(input.command, { timeoutSeconds: ms / 1000 }), options);
    }
    case "run_python": {
      if (typeof input?.code !== "string") return 'error: run_python needs a string "code"';
      // One call: the program goes in on stdin and is saved to a file first, so tracebacks quote its lines.
      const file = `.airlock/run_python/${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}.py`;
      const script = 'mkdir -p .airlock/run_python && cat > "$1" && exec python3 "$1" </dev/null';
      return formatObservation(await sbx.exec(["sh", "-c", script, "sh", file], { stdin: input.code, timeoutSeconds: defaultTimeoutMs / 1000 }), options);
    }
  }
  throw new InvalidRequestError(`unknown tool ${JSON.stringify(name)}: Airlock's tools are run_command and run_python`, 0, "invalid_request", "name");
}
