export { Sandbox } from "./sandbox.js";
export type { CreateOptions, ExecOptions, Network, SandboxInfo } from "./sandbox.js";
export { Files } from "./files.js";
export type { FileEntry } from "./files.js";
export type { ConnectionOptions } from "./http.js";
export type { ExecResult, Outcome, StreamTruncation, WireExecResult } from "./result.js";
export { formatObservation } from "./observation.js";
export type { ObservationOptions } from "./observation.js";
export { anthropicTools, fetchTools, openaiTools, runTool, toolDefinitions, vercelTools } from "./tools.js";
export type { AnthropicTool, FetchToolsOptions, InputSchema, OpenAITool, ToolContext, ToolDefinition, ToolInput, VercelTool } from "./tools.js";
export {
  AirlockError,
  AuthenticationError,
  ClusterUnavailableError,
  ConflictError,
  ConnectionError,
  ExecTimeout,
  InvalidRequestError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  RateLimitedError,
  SandboxLostError,
  SandboxNotReadyError,
  TooLargeError,
} from "./errors.js";
export { VERSION } from "./version.js";
