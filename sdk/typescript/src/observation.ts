import { resultFromWire, type ExecResult, type WireExecResult } from "./result.js";

export interface ObservationOptions {
  /** Characters kept per stream (the tail); 0 or less keeps everything. Default 4000. */
  maxChars?: number;
}

const explanations: Record<string, string> = {
  timeout: "the command ran out of time and was killed; the output is what it printed until then",
  signal: "the command was killed by a signal",
  oom: "the command was killed: the sandbox ran out of memory",
  output_limit: "the command was killed: it printed more than the output limit",
  sandbox_lost: "the sandbox stopped answering; the command's exit status is unknown",
};

/**
 * The text a model should see for a command's result (docs/sdk.md, "format_observation"): exit code and
 * duration first, then stderr, then stdout, each cut to its last `maxChars` characters, with a note whenever
 * the sandbox or this formatter cut output. Takes the SDK's result or the gateway's JSON object as is.
 */
export function formatObservation(result: ExecResult | WireExecResult, options: ObservationOptions = {}): string {
  const r = "exit_code" in result ? resultFromWire(result) : result;
  const maxChars = options.maxChars ?? 4000;
  const lines = [`exit_code: ${r.exitCode}`, `duration_ms: ${Math.trunc(r.durationMs)}`];
  if (r.outcome && r.outcome !== "exited") {
    const why = explanations[r.outcome];
    lines.push(why ? `outcome: ${r.outcome} (${why})` : `outcome: ${r.outcome}`);
  }
  if (r.signal) lines.push(`signal: ${r.signal}`);
  if (r.detail) lines.push(`detail: ${r.detail}`);
  if (r.outputIncomplete) lines.push("note: part of the output was lost before it reached the gateway");

  const sections: string[] = [];
  for (const stream of ["stderr", "stdout"] as const) {
    const t = r.truncation[stream];
    if (t.truncated) {
      const where = t.fullOutputPath ? `is in ${t.fullOutputPath}` : "was not saved";
      lines.push(`note: the sandbox cut ${stream}: ${t.omittedBytes} bytes omitted; the full ${stream} ${where}`);
    }
    // Code points, not UTF-16 units: a cut never splits a character.
    let chars = Array.from(r[stream]);
    let header = "";
    if (maxChars > 0 && chars.length > maxChars) {
      const omitted = chars.length - maxChars;
      lines.push(`note: ${stream} was shortened to its last ${maxChars} characters (${omitted} omitted)`);
      chars = chars.slice(omitted);
      header = `[... ${omitted} characters omitted ...]\n`;
    }
    const text = header + chars.join("");
    sections.push(text === "" ? `${stream}: (empty)` : `${stream}:\n${text.endsWith("\n") ? text.slice(0, -1) : text}`);
  }
  if (r.truncated && !r.truncation.stderr.truncated && !r.truncation.stdout.truncated) {
    lines.push("note: the sandbox cut the output");
  }
  return [...lines, ...sections].join("\n");
}
