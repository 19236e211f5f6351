"""format_observation: an exec result as the text a model should see (spec: docs/sdk.md)."""

from __future__ import annotations

from typing import Any, Mapping, Union

DEFAULT_MAX_CHARS = 4000

_OUTCOME_NOTES = {
    "timeout": "the command ran out of time and was killed; the output is what it printed until then",
    "signal": "the command was killed by a signal",
    "oom": "the command was killed: the sandbox ran out of memory",
    "output_limit": "the command was killed: it printed more than the output limit",
    "sandbox_lost": "the sandbox stopped answering; the command's exit status is unknown",
}


def _get(result: Any, key: str, default: Any = None) -> Any:
    if isinstance(result, Mapping):
        return result.get(key, default)
    return getattr(result, key, default)


def format_observation(result: Union[Mapping[str, Any], Any], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Render an exec result (an ExecResult or the gateway's JSON object) for a model.

    Exit code and duration come first, then notes on anything cut, then the stderr tail and the stdout tail,
    each at most ``max_chars`` characters (0 keeps everything).
    """
    outcome = _get(result, "outcome") or "exited"
    exit_code = 124 if outcome == "timeout" else _get(result, "exit_code", -1)
    lines = [f"exit_code: {exit_code}", f"duration_ms: {_get(result, 'duration_ms', 0)}"]
    if outcome != "exited":
        note = _OUTCOME_NOTES.get(outcome)
        lines.append(f"outcome: {outcome} ({note})" if note else f"outcome: {outcome}")
    signal = _get(result, "signal")
    if signal:
        lines.append(f"signal: {signal}")
    detail = _get(result, "detail")
    if detail:
        lines.append(f"detail: {detail}")
    if _get(result, "output_incomplete"):
        lines.append("note: part of the output was lost before it reached the gateway")

    truncation = _get(result, "truncation") or {}
    sandbox_cut = False
    sections = []
    for stream in ("stderr", "stdout"):
        text = _get(result, stream) or ""
        info = _get(truncation, stream) or {}
        if _get(info, "truncated"):
            sandbox_cut = True
            path = _get(info, "full_output_path")
            where = f"the full {stream} is in {path}" if path else f"the full {stream} was not saved"
            lines.append(f"note: the sandbox cut {stream}: {_get(info, 'omitted_bytes', 0)} bytes omitted; {where}")
        if max_chars > 0 and len(text) > max_chars:
            omitted = len(text) - max_chars
            text = f"[... {omitted} characters omitted ...]\n" + text[-max_chars:]
            lines.append(f"note: {stream} was shortened to its last {max_chars} characters ({omitted} omitted)")
        sections.append((stream, text))
    if _get(result, "truncated") and not sandbox_cut:
        lines.append("note: the sandbox cut the output")
    for stream, text in sections:
        if not text:
            lines.append(f"{stream}: (empty)")
        else:
            lines.append(f"{stream}:\n{text[:-1] if text.endswith(chr(10)) else text}")
    return "\n".join(lines)
