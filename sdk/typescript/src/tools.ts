import { InvalidRequestError } from "./errors.js";
import { Transport, type ConnectionOptions } from "./http.js";
import { formatObservation, type ObservationOptions } from "./observation.js";
import type { Sandbox } from "./sandbox.js";

/**
 * What the tool descriptions tell a model about its sandbox; what is not given is not claimed. The gateway
 * fills it from the template (`fetchTools`, `sbx.tools()`).
 */
export interface ToolContext {
  /** What the image has, e.g. "Python 3.11 (python, pip), Node.js 22 (npm), git". */
  installed?: string;
  /** `none` or `restricted`. */
  network?: string;
  /** Where commands start; default `/home/sandbox`. */
  workingDir?: string;
  /** A command's limit when the model gives none; default 60000. */
  defaultTimeoutMs?: number;
}

/** The JSON Schema of a tool's input. */
export interface InputSchema {
  type: "object";
  properties: Record<string, unknown>;
  required: string[];
  [key: string]: unknown;
}

/** A tool as a name, a description and the JSON Schema of its input. */
export interface ToolDefinition {
  name: "run_command" | "run_python";
  description: string;
  inputSchema: InputSchema;
}

export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: InputSchema;
}

export interface OpenAITool {
  type: "function";
  function: { name: string; description: string; parameters: InputSchema };
}

/** The input a model sends: `{command, timeout_ms?}` for run_command, `{code}` for run_python. */
export type ToolInput = Record<string, unknown>;

const defaultTimeoutMs = 60_000;

/** run_command and run_python, provider-neutral; word for word what the Go and Python SDKs and the gateway say. */
export function toolDefinitions(ctx: ToolContext = {}): ToolDefinition[] {
  const ms = ctx.defaultTimeoutMs ?? defaultTimeoutMs;
  let env = "";
  if (ctx.installed) env += ` Installed: ${ctx.installed.replace(/\.$/, "")}.`;
  env += ` The working directory is ${ctx.workingDir ?? "/home/sandbox"}; files written and packages installed there persist between calls` +
    " within this conversation.";
  env += " Stdin is closed, so interactive commands (prompts, editors, REPLs) wait and time out: pass" +
    " non-interactive flags such as -y.";
  if (ctx.network === "none") env += " The sandbox has no network access: downloads (pip install, npm install, curl) fail.";
  if (ctx.network === "restricted") env += " Network access is restricted to the destinations the platform allows; others fail.";
  env += " The result gives the exit code, then the end of stderr and stdout; long output keeps its tail" +
    " and names the file in the sandbox with all of it.";
  const timeout = {
    type: "integer", minimum: 1, default: ms,
    description: `Time limit in milliseconds (default ${ms}); at the limit the command and everything it started are killed.`,
  };
  return [
    {
      name: "run_command",
      description: `Run one shell command (sh -c) in a Linux sandbox, time limit ${ms} ms unless timeout_ms says otherwise.` + env,
      inputSchema: {
        type: "object", required: ["command"],
        properties: { command: { type: "string", description: "The shell command to run." }, timeout_ms: timeout },
      },
    },
    {
      name: "run_python",
      description: `Run a Python program in a Linux sandbox (written to a file and run with python3), time limit ${ms} ms; print what you need to see.` + env,
      inputSchema: {
        type: "object", required: ["code"],
        properties: { code: { type: "string", description: "The complete Python program." } },
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

/** A Vercel AI SDK tool; `S` is what the SDK's `jsonSchema()` returns. */
export interface VercelTool<S> {
  description: string;
  inputSchema: S;
  execute: (input: ToolInput) => Promise<string>;
}

/**
 * The tools for the Vercel AI SDK (5 or later), run in `sbx`: `tools: vercelTools(sbx, jsonSchema)` with
 * `jsonSchema` imported from "ai", so that this package needs no dependency on it.
 */
export function vercelTools<S>(
  sbx: Sandbox,
  jsonSchema: (schema: any) => S,
  ctx?: ToolContext,
  options?: ObservationOptions,
): Record<"run_command" | "run_python", VercelTool<S>> {
  const [command, python] = toolDefinitions(ctx).map((t) => ({
    description: t.description,
    inputSchema: jsonSchema(t.inputSchema),
    execute: (input: ToolInput) => runTool(sbx, t.name, input, options),
  }));
  return { run_command: command!, run_python: python! };
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
  return toolsFrom(new Transport(options), options.format, options.template);
}

/** @internal */
export async function toolsFrom(transport: Transport, format: string, template?: string): Promise<AnthropicTool[] | OpenAITool[]> {
  const query: Record<string, string> = { format };
  if (template) query.template = template;
  const out = await transport.json<{ tools: AnthropicTool[] | OpenAITool[] }>({
    method: "GET", path: "/v1/tools", query, timeoutMs: 30_000,
  });
  return out.tools;
}

/**
 * Runs one tool call in the sandbox and returns the observation for the model (`formatObservation`). Input the
 * model got wrong is answered with a message it can act on; an unknown tool name is the caller's bug and throws.
 */
export async function runTool(sbx: Sandbox, name: string, input: ToolInput, options?: ObservationOptions): Promise<string> {
  const ms = typeof input?.timeout_ms === "number" && input.timeout_ms > 0 ? input.timeout_ms : defaultTimeoutMs;
  switch (name) {
    case "run_command": {
      if (typeof input?.command !== "string") return 'error: run_command needs a string "command"';
      return formatObservation(await sbx.exec(input.command, { timeoutSeconds: ms / 1000 }), options);
    }
    case "run_python": {
      if (typeof input?.code !== "string") return 'error: run_python needs a string "code"';
      // One call: the program arrives on stdin and is saved to a file of its own before it runs, so tracebacks
      // quote its lines and calls the model makes in parallel do not overwrite each other's program.
      const file = `.airlock/run_python/${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}.py`;
      const script = 'mkdir -p .airlock/run_python && cat > "$1" && exec python3 "$1" </dev/null';
      return formatObservation(await sbx.exec(["sh", "-c", script, "sh", file], { stdin: input.code, timeoutSeconds: ms / 1000 }), options);
    }
  }
  throw new InvalidRequestError(`unknown tool ${JSON.stringify(name)}: Airlock's tools are run_command and run_python`, 0, "invalid_request", "name");
}
