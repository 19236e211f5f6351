import {
  ConnectionError,
  ExecTimeout,
  NotFoundError,
  SandboxNotReadyError,
  errorFromResponse,
  type ErrorBody,
} from "./errors.js";
import { Files } from "./files.js";
import { Transport, type ConnectionOptions } from "./http.js";
import { resultFromWire, type ExecResult, type WireExecResult } from "./result.js";
import type { ObservationOptions } from "./observation.js";
import { runTool, toolsFrom, type AnthropicTool, type OpenAITool, type ToolInput } from "./tools.js";

export type Network = "none" | "off" | "restricted";

export interface CreateOptions extends ConnectionOptions {
  /** SandboxTemplate name; default: the gateway's default template. */
  template?: string;
  /** small | medium | large. */
  size?: string;
  /** Hard expiry, minutes from creation; may be raised later with `setTimeout`. */
  timeoutMinutes?: number;
  /** Expire after this many minutes without a command, file transfer or running background process. */
  idleTimeoutMinutes?: number;
  /** `none` (or `off`, the default) or `restricted`. */
  network?: Network;
  /** Environment of every command. */
  env?: Record<string, string>;
  /** Like env, for this sandbox only: kept in a Secret that goes with it, masked as [masked:NAME] in output. */
  secrets?: Record<string, string>;
  /** Labels of your own, returned by `info()` and `list()`. */
  metadata?: Record<string, string>;
  /** How long to wait for the sandbox to be ready before giving up (and deleting it); default 180. */
  readyTimeoutSeconds?: number;
}

export interface ExecOptions {
  /** Kill the command after this long; default 60. The result then has outcome `timeout` and exit code 124. */
  timeoutSeconds?: number;
  /** Working directory; default the sandbox's (`/home/sandbox`). */
  cwd?: string;
  env?: Record<string, string>;
  /** The command's stdin; otherwise stdin is closed. */
  stdin?: string;
  /** Per-stream budget of output returned inline; the rest stays in a file in the sandbox. */
  maxOutputBytes?: number;
  /** Kill the command once its output passes this many bytes (outcome `output_limit`). */
  killAfterOutputBytes?: number;
  /** Called with each piece of stdout as it arrives (the call streams NDJSON when a callback is given). */
  onStdout?: (data: string) => void | Promise<void>;
  onStderr?: (data: string) => void | Promise<void>;
  /** Throw `ExecTimeout` (with the partial result) instead of returning a timeout result. */
  throwOnTimeout?: boolean;
  signal?: AbortSignal;
}

/** A sandbox as the gateway describes it. */
export interface SandboxInfo {
  id: string;
  /** pending, ready, expired, terminating or failed. */
  status: string;
  reason?: string;
  message?: string;
  template?: string;
  image?: string;
  size?: string;
  network?: string;
  isolation?: string;
  timeoutMinutes?: number;
  maxTimeoutMinutes?: number;
  workingDir: string;
  createdAt: Date;
  startedAt?: Date;
  expiresAt?: Date;
  usageSeconds: number;
  metadata: Record<string, string>;
}

interface WireSandbox {
  id: string;
  status: string;
  reason?: string;
  message?: string;
  template?: string;
  image?: string;
  size?: string;
  network?: string;
  isolation?: string;
  timeout_minutes?: number;
  max_timeout_minutes?: number;
  working_dir: string;
  created_at: string;
  started_at?: string;
  expires_at?: string | null;
  usage_seconds?: number;
  metadata?: Record<string, string>;
}

function infoOf(w: WireSandbox): SandboxInfo {
  const info: SandboxInfo = {
    id: w.id,
    status: w.status,
    workingDir: w.working_dir,
    createdAt: new Date(w.created_at),
    usageSeconds: w.usage_seconds ?? 0,
    metadata: w.metadata ?? {},
  };
  const optional = {
    reason: w.reason,
    message: w.message,
    template: w.template,
    image: w.image,
    size: w.size,
    network: w.network,
    isolation: w.isolation,
    timeoutMinutes: w.timeout_minutes,
    maxTimeoutMinutes: w.max_timeout_minutes,
    startedAt: w.started_at ? new Date(w.started_at) : undefined,
    expiresAt: w.expires_at ? new Date(w.expires_at) : undefined,
  };
  for (const [k, v] of Object.entries(optional)) if (v !== undefined && v !== "") (info as any)[k] = v;
  return info;
}

/** Ordinary calls (not exec, not file transfers) get this long for an answer. */
const callTimeoutMs = 30_000;
/** Create waits for the sandbox to be ready on the gateway (up to its --ready-timeout, 60 s by default). */
const createTimeoutMs = 120_000;
/** An exec's answer may come this long after the command's own timeout: the gateway's grace and slack. */
const execSlackMs = 60_000;

const ndjsonStatus: Record<string, number> = {
  invalid_request: 400,
  not_found: 404,
  sandbox_not_ready: 409,
  sandbox_lost: 502,
  cluster_unavailable: 503,
  gateway_busy: 503,
};

/**
 * One disposable, isolated computer: create one per conversation and delete it at the end, e.g. with
 * `await using sbx = await Sandbox.create()`, which always deletes it.
 */
export class Sandbox {
  readonly id: string;
  readonly files: Files;
  /** @internal */
  readonly transport: Transport;
  private terminated = false;

  private constructor(transport: Transport, id: string) {
    this.transport = transport;
    this.id = id;
    this.files = new Files(this);
  }

  /** Creates a sandbox and waits until it is ready. */
  static async create(options: CreateOptions = {}): Promise<Sandbox> {
    const transport = new Transport(options);
    const body: Record<string, unknown> = {};
    if (options.template !== undefined) body.template = options.template;
    if (options.size !== undefined) body.size = options.size;
    if (options.timeoutMinutes !== undefined) body.timeout_minutes = options.timeoutMinutes;
    if (options.idleTimeoutMinutes !== undefined) body.idle_timeout_minutes = options.idleTimeoutMinutes;
    if (options.network !== undefined) body.network = options.network === "off" ? "none" : options.network;
    if (options.env !== undefined) body.env = options.env;
    if (options.secrets !== undefined) body.secrets = options.secrets;
    if (options.metadata !== undefined) body.metadata = options.metadata;
    const created = await transport.json<WireSandbox>({
      method: "POST", path: "/v1/sandboxes", json: body, timeoutMs: createTimeoutMs,
    });
    const sbx = new Sandbox(transport, created.id);
    try {
      await sbx.waitReady(created, (options.readyTimeoutSeconds ?? 180) * 1000);
    } catch (err) {
      await sbx.terminate().catch(() => {});
      throw err;
    }
    return sbx;
  }

  /** A sandbox that exists already, e.g. created by another process for the same conversation. */
  static async connect(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const sbx = new Sandbox(new Transport(options), id);
    await sbx.info();
    return sbx;
  }

  /** The tenant's sandboxes, oldest first. */
  static async list(options: ConnectionOptions = {}): Promise<SandboxInfo[]> {
    const out = await new Transport(options).json<{ sandboxes: WireSandbox[] }>({
      method: "GET", path: "/v1/sandboxes", timeoutMs: callTimeoutMs,
    });
    return out.sandboxes.map(infoOf);
  }

  private async waitReady(first: WireSandbox, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let w = first;
    for (let delay = 250; w.status === "pending"; delay = Math.min(delay * 2, 2000)) {
      if (Date.now() > deadline) {
        throw new SandboxNotReadyError(`sandbox ${this.id} was not ready within ${timeoutMs / 1000}s`, 0, "sandbox_not_ready", w.status, w.reason);
      }
      await new Promise((r) => setTimeout(r, delay));
      w = await this.wire();
    }
    if (w.status !== "ready") {
      const why = [w.reason, w.message].filter(Boolean).join(": ");
      throw new SandboxNotReadyError(`sandbox ${this.id} is ${w.status}${why ? ` (${why})` : ""}`, 0, "sandbox_not_ready", w.status, w.reason);
    }
  }

  private wire(): Promise<WireSandbox> {
    return this.transport.json<WireSandbox>({
      method: "GET", path: `/v1/sandboxes/${encodeURIComponent(this.id)}`, timeoutMs: callTimeoutMs,
    });
  }

  async info(): Promise<SandboxInfo> {
    return infoOf(await this.wire());
  }

  /**
   * Runs a shell command (a string) or an argv (an array, no shell). Whatever the command does, the answer is
   * a result: a non-zero exit, a timeout (outcome `timeout`, exit code 124) or a kill. Errors are for calls
   * that did not run the command, or lost it.
   */
  async exec(command: string | string[], options: ExecOptions = {}): Promise<ExecResult> {
    const timeoutSeconds = options.timeoutSeconds ?? 60;
    const body: Record<string, unknown> = typeof command === "string" ? { command } : { argv: command };
    const timeoutMs = Math.round(timeoutSeconds * 1000);
    body.timeout_ms = timeoutMs;
    if (options.cwd !== undefined) body.cwd = options.cwd;
    if (options.env !== undefined) body.env = options.env;
    if (options.stdin !== undefined) body.stdin = options.stdin;
    if (options.maxOutputBytes !== undefined) body.max_output_bytes = options.maxOutputBytes;
    if (options.killAfterOutputBytes !== undefined) body.kill_after_output_bytes = options.killAfterOutputBytes;
    const streaming = options.onStdout !== undefined || options.onStderr !== undefined;
    const resp = await this.transport.send({
      method: "POST",
      path: `/v1/sandboxes/${encodeURIComponent(this.id)}/exec`,
      json: body,
      accept: streaming ? "application/x-ndjson" : "application/json",
     
      exec: true,
      timeoutMs: timeoutMs + execSlackMs,
      signal: options.signal,
    });
    const isStream = (resp.headers.get("Content-Type") ?? "").startsWith("application/x-ndjson");
    const wire = isStream ? await readStream(resp, options) : ((await resp.json()) as WireExecResult);
    const result = resultFromWire(wire);
    if (result.outcome === "timeout" && options.throwOnTimeout) throw new ExecTimeout(result, timeoutSeconds);
    return result;
  }

  /** Runs one model tool call (`run_command` or `run_python`) and returns the observation text for the model. */
  runTool(name: string, input: ToolInput, options?: ObservationOptions): Promise<string> {
    return runTool(this, name, input, options);
  }

  /** run_command and run_python as the gateway describes them for this sandbox's template. */
  async tools(format: "anthropic"): Promise<AnthropicTool[]>;
  async tools(format: "openai"): Promise<OpenAITool[]>;
  async tools(format: "anthropic" | "openai"): Promise<AnthropicTool[] | OpenAITool[]> {
    const { template } = await this.info();
    return toolsFrom(this.transport, format, template);
  }

  /** Sets the sandbox's total lifetime, counted from its creation. It can only grow. */
  async setTimeout(minutes: number): Promise<SandboxInfo> {
    return infoOf(await this.transport.json<WireSandbox>({
      method: "POST", path: `/v1/sandboxes/${encodeURIComponent(this.id)}/timeout`,
      json: { timeout_minutes: minutes }, timeoutMs: callTimeoutMs,
    }));
  }

  /** Deletes the sandbox with everything in it. Idempotent: a sandbox already gone is fine. */
  async terminate(): Promise<void> {
    if (this.terminated) return;
    try {
      await this.transport.send({
        method: "DELETE", path: `/v1/sandboxes/${encodeURIComponent(this.id)}`, timeoutMs: callTimeoutMs,
      });
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
    this.terminated = true;
  }

  /** Same as `terminate()`, the name other sandbox SDKs use. */
  kill(): Promise<void> {
    return this.terminate();
  }

  /** `await using sbx = await Sandbox.create()` deletes the sandbox when the scope ends, however it ends. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.terminate();
  }
}

/** Reads an NDJSON exec answer: output lines to the callbacks as they arrive, the result last. */
async function readStream(resp: Response, options: ExecOptions): Promise<WireExecResult> {
  if (!resp.body) throw new ConnectionError("exec: empty stream", resp.status);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let result: WireExecResult | undefined;
  const handle = async (line: string) => {
    if (line.trim() === "") return;
    let msg: { stream?: string; data?: string; error?: ErrorBody } & Partial<WireExecResult>;
    try {
      msg = JSON.parse(line);
    } catch {
      throw new ConnectionError(`exec: not an NDJSON line: ${line.slice(0, 200)}`, resp.status);
    }
    if (msg.stream === "stdout") await options.onStdout?.(msg.data ?? "");
    else if (msg.stream === "stderr") await options.onStderr?.(msg.data ?? "");
    else if (msg.error) throw errorFromResponse(ndjsonStatus[msg.error.code ?? ""] ?? 500, msg.error);
    else if (msg.exit_code !== undefined) result = msg as WireExecResult;
  };
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (options.signal?.aborted) throw options.signal.reason;
        throw new ConnectionError(`exec: the stream broke: ${(err as Error).message}; the command may have run`, resp.status, "", undefined, { cause: err });
      }
      if (chunk.value) buf += chunk.value;
      const lines = buf.split("\n");
      buf = lines.pop()!;
      for (const line of lines) await handle(line);
      if (chunk.done) break;
    }
    await handle(buf);
  } finally {
    // Also ends the response when a callback threw midway, so the connection is not left open.
    await reader.cancel().catch(() => {});
  }
  if (!result) throw new ConnectionError("exec: the stream ended without a result; the command may have run", resp.status);
  return result;
}
