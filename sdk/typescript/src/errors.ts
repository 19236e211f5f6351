import type { ExecResult } from "./result.js";

/** The gateway's error body, `{"error": {...}}`. */
export interface ErrorBody {
  code?: string;
  message?: string;
  field?: string;
  phase?: string;
  reason?: string;
}

/** Base class of every error the SDK throws for a failed call. */
export class AirlockError extends Error {
  /** HTTP status, or 0 when no answer arrived. */
  readonly status: number;
  /** The gateway's error code, e.g. `quota_exceeded`. */
  readonly code: string;
  /** Seconds the gateway asked to wait (Retry-After), if it did. */
  readonly retryAfter: number | undefined;

  constructor(message: string, status = 0, code = "", retryAfter?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

/** 401: the key is missing, malformed, unknown or revoked. */
export class AuthenticationError extends AirlockError {}

/** 403: the key is valid but its namespace is not (or no longer) a tenant. */
export class PermissionDeniedError extends AuthenticationError {}

/** 404: no such sandbox (or file) for this key's tenant. */
export class NotFoundError extends AirlockError {
  /** `path` when a file or directory is missing. */
  readonly field: string | undefined;
  constructor(message: string, status: number, code: string, field?: string) {
    super(message, status, code);
    this.field = field;
  }
}

/** 400: bad input; `field` names the request field at fault. */
export class InvalidRequestError extends AirlockError {
  readonly field: string | undefined;
  constructor(message: string, status: number, code: string, field?: string) {
    super(message, status, code);
    this.field = field;
  }
}

/** 409 `conflict` or `image_unsupported`. */
export class ConflictError extends AirlockError {}

/** 409 `sandbox_not_ready`: the sandbox is pending, expired, failed or terminating. */
export class SandboxNotReadyError extends AirlockError {
  readonly phase: string | undefined;
  readonly reason: string | undefined;
  constructor(message: string, status: number, code: string, phase?: string, reason?: string) {
    super(message, status, code);
    this.phase = phase;
    this.reason = reason;
  }
}

/** 413: a body, file or the sandbox's disk is too large. */
export class TooLargeError extends AirlockError {}

/** 429 `quota_exceeded`: the tenant's sandbox limit is reached; delete one first. Not retried. */
export class QuotaExceededError extends AirlockError {}

/** 429 `rate_limited`, `too_many_concurrent_execs` or `memory_budget_exceeded`, after the retries ran out. */
export class RateLimitedError extends AirlockError {}

/** 502 `sandbox_lost`: a file transfer broke off. (An exec whose sandbox stopped answering is a result, outcome `sandbox_lost`.) */
export class SandboxLostError extends AirlockError {}

/** 503 `cluster_unavailable` or `gateway_busy`, after the retries ran out. */
export class ClusterUnavailableError extends AirlockError {}

/** No HTTP answer: the gateway was unreachable, or the connection broke. */
export class ConnectionError extends AirlockError {}

/** Thrown by `exec` with `throwOnTimeout: true` when the command ran out of time; carries the partial result. */
export class ExecTimeout extends AirlockError {
  readonly result: ExecResult;
  constructor(result: ExecResult, timeoutSeconds: number) {
    super(`command timed out after ${timeoutSeconds}s`, 200, "timeout");
    this.result = result;
  }
}

/** Maps an error answer to its class. */
export function errorFromResponse(status: number, body: ErrorBody | undefined, retryAfter?: number): AirlockError {
  const code = body?.code ?? "";
  const message = body?.message || `HTTP ${status}`;
  switch (true) {
    case status === 401:
      return new AuthenticationError(message, status, code);
    case status === 403:
      return new PermissionDeniedError(message, status, code);
    case status === 404:
      return new NotFoundError(message, status, code, body?.field);
    case status === 400:
      return new InvalidRequestError(message, status, code, body?.field);
    case code === "sandbox_not_ready":
      return new SandboxNotReadyError(message, status, code, body?.phase, body?.reason);
    case status === 409:
      return new ConflictError(message, status, code);
    case status === 413:
      return new TooLargeError(message, status, code);
    case code === "quota_exceeded":
      return new QuotaExceededError(message, status, code, retryAfter);
    case status === 429:
      return new RateLimitedError(message, status, code, retryAfter);
    case code === "sandbox_lost" || status === 502:
      return new SandboxLostError(message, status, code);
    case status === 503:
      return new ClusterUnavailableError(message, status, code, retryAfter);
  }
  return new AirlockError(message, status, code, retryAfter);
}
