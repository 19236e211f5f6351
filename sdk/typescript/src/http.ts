import { AirlockError, ConnectionError, errorFromResponse, type ErrorBody } from "./errors.js";
import { VERSION } from "./version.js";

/** Where the gateway is and how to authenticate; both default to the environment. */
export interface ConnectionOptions {
  /** API key, `alk_<id>_<secret>`; default `AIRLOCK_API_KEY`. */
  apiKey?: string;
  /** The gateway's base URL without `/v1`, e.g. `http://airlock-gateway.airlock-system`; default `AIRLOCK_API_URL`. */
  baseUrl?: string;
  /** Retries of a call refused with 429 (rate limits) or 503, or whose connection was refused; default 4. */
  maxRetries?: number;
}

export interface Call {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: Record<string, string>;
  json?: unknown;
  body?: Uint8Array | string;
  contentType?: string;
  accept?: string;
  /**
   * Every call is retried on a 429 (but quota_exceeded) or 503, which the gateway answers before it acts, and
   * when the connection was refused. An exec only on those in the gateway's own error format: a command that
   * ran always answers 200 with its result, but a proxy's 503 proves nothing.
   */
  exec?: boolean;
  timeoutMs: number;
  signal?: AbortSignal;
}

const env = (name: string): string | undefined => globalThis.process?.env?.[name] || undefined;

/** Network failures that prove the request never reached a server; any other may have come after it acted. */
const notSentCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

function errnoOf(err: unknown): string | undefined {
  const cause = (err as { cause?: { code?: string; errors?: { code?: string }[] } })?.cause;
  return cause?.code ?? cause?.errors?.[0]?.code;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

export class Transport {
  readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly maxRetries: number;

  constructor(opts: ConnectionOptions = {}) {
    const apiKey = opts.apiKey ?? env("AIRLOCK_API_KEY");
    const baseUrl = opts.baseUrl ?? env("AIRLOCK_API_URL");
    if (!apiKey) throw new AirlockError("no API key: pass apiKey or set AIRLOCK_API_KEY", 0, "configuration");
    if (!baseUrl) throw new AirlockError("no gateway URL: pass baseUrl or set AIRLOCK_API_URL", 0, "configuration");
    this.apiKey = apiKey;
    // The base URL is documented without /v1; accept it with /v1 or a trailing slash too.
    this.baseUrl = baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
    this.maxRetries = opts.maxRetries ?? 4;
  }

  /** Sends the call, retrying as `Call` describes, and returns a 2xx response; anything else is thrown. */
  async send(call: Call): Promise<Response> {
    const url = new URL(this.baseUrl + call.path);
    for (const [k, v] of Object.entries(call.query ?? {})) url.searchParams.set(k, v);
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.apiKey}`,
      "User-Agent": `airlock-sdk-typescript/${VERSION}`,
    };
    let body: Uint8Array | string | undefined = call.body;
    if (call.json !== undefined) {
      body = JSON.stringify(call.json);
      headers["Content-Type"] = "application/json";
    } else if (call.contentType) {
      headers["Content-Type"] = call.contentType;
    }
    headers["Accept"] = call.accept ?? "application/json";

    for (let attempt = 0; ; attempt++) {
      const timeout = AbortSignal.timeout(call.timeoutMs);
      const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
      let resp: Response;
      try {
        resp = await fetch(url, { method: call.method, headers, body, signal });
      } catch (err) {
        if (call.signal?.aborted) throw call.signal.reason;
        if (timeout.aborted) {
          throw new ConnectionError(`${call.method} ${call.path}: no answer within ${call.timeoutMs} ms`, 0, "timeout");
        }
        const errno = errnoOf(err);
        if (errno !== undefined && notSentCodes.has(errno) && attempt < this.maxRetries) {
          await sleep(backoff(attempt), call.signal);
          continue;
        }
        throw new ConnectionError(`${call.method} ${call.path}: ${errno ?? (err as Error).message}`, 0, errno ?? "", undefined, { cause: err });
      }
      if (resp.ok) return resp;

      const text = await resp.text().catch(() => "");
      let errBody: ErrorBody | undefined;
      try {
        errBody = (JSON.parse(text) as { error?: ErrorBody }).error;
      } catch {
        // Not the gateway's format (a proxy's page): the status alone speaks.
      }
      const header = resp.headers.get("Retry-After");
      const retryAfter = header !== null && /^\d+$/.test(header) ? Number(header) : undefined;
      const refused = (resp.status === 429 && errBody?.code !== "quota_exceeded") || resp.status === 503;
      if (refused && (!call.exec || errBody?.code !== undefined) && attempt < this.maxRetries) {
        await sleep(backoff(attempt, retryAfter), call.signal);
        continue;
      }
      throw errorFromResponse(resp.status, errBody ?? { message: text.slice(0, 300) || undefined }, retryAfter);
    }
  }

  async json<T>(call: Call): Promise<T> {
    const resp = await this.send(call);
    return (await resp.json()) as T;
  }
}

/** The SDKs' shared backoff (docs/sdk.md): 0.5 s doubling, at least the Retry-After, at most 30 s. */
function backoff(attempt: number, retryAfterSeconds = 0): number {
  return Math.min(30_000, Math.max(retryAfterSeconds * 1000, 500 * 2 ** attempt));
}
