/** How a command ended. */
export type Outcome = "exited" | "timeout" | "signal" | "oom" | "output_limit" | "sandbox_lost" | (string & {});

/** What of one stream is inline and where the rest is. */
export interface StreamTruncation {
  truncated: boolean;
  keptBytes: number;
  omittedBytes: number;
  /** The file in the sandbox that holds the whole output, when the inline text was cut. */
  fullOutputPath?: string;
}

/** The result of `exec`. A non-zero exit, a timeout or a kill is a result like any other. */
export interface ExecResult {
  /** The command's exit status; 128+N after signal N; 124 on timeout (like timeout(1)); -1 if unknown. */
  exitCode: number;
  stdout: string;
  stderr: string;
  outcome: Outcome;
  /** True when either stream was cut to the inline budget (see `truncation`). */
  truncated: boolean;
  truncation: { stdout: StreamTruncation; stderr: StreamTruncation };
  durationMs: number;
  /** The signal that ended the command, e.g. `SIGKILL`. */
  signal?: string;
  /** Bytes the command wrote to each stream, all of them, inline or not. */
  stdoutBytes: number;
  stderrBytes: number;
  /** The output is known to be incomplete (the stream broke and the outcome was read back). */
  outputIncomplete: boolean;
  /** Why the call was cut short or what killed the command, when there is more to say. */
  detail?: string;
}

interface WireTruncation {
  truncated?: boolean;
  kept_bytes?: number;
  omitted_bytes?: number;
  full_output_path?: string;
}

/** The exec result as the gateway sends it. */
export interface WireExecResult {
  exit_code: number;
  duration_ms?: number;
  stdout?: string;
  stderr?: string;
  truncated?: boolean;
  outcome?: string;
  signal?: string;
  stdout_bytes?: number;
  stderr_bytes?: number;
  truncation?: { stdout?: WireTruncation; stderr?: WireTruncation };
  output_incomplete?: boolean;
  detail?: string;
}

function truncationOf(t: WireTruncation | undefined): StreamTruncation {
  const out: StreamTruncation = {
    truncated: t?.truncated ?? false,
    keptBytes: t?.kept_bytes ?? 0,
    omittedBytes: t?.omitted_bytes ?? 0,
  };
  if (t?.full_output_path) out.fullOutputPath = t.full_output_path;
  return out;
}

export function resultFromWire(w: WireExecResult): ExecResult {
  const r: ExecResult = {
    // The gateway reports the killed process's status on timeout (usually -1); 124 reads as a failure alone.
    exitCode: w.outcome === "timeout" ? 124 : w.exit_code,
    stdout: w.stdout ?? "",
    stderr: w.stderr ?? "",
    outcome: w.outcome ?? "exited",
    truncated: w.truncated ?? false,
    truncation: { stdout: truncationOf(w.truncation?.stdout), stderr: truncationOf(w.truncation?.stderr) },
    durationMs: w.duration_ms ?? 0,
    stdoutBytes: w.stdout_bytes ?? 0,
    stderrBytes: w.stderr_bytes ?? 0,
    outputIncomplete: w.output_incomplete ?? false,
  };
  if (w.signal) r.signal = w.signal;
  if (w.detail) r.detail = w.detail;
  return r;
}
