"""run_command and run_python as model tools (the gateway serves the template's own: Sandbox.tools())."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

DEFAULT_TIMEOUT_MS = 60000
RUN_PYTHON_FILE = ".airlock/run_python.py"


def tool_definitions(format: str = "anthropic", installed: Optional[str] = None, working_dir: str = "/home/sandbox",
                     network: Optional[str] = None, default_timeout_ms: int = DEFAULT_TIMEOUT_MS) -> List[Dict[str, Any]]:
    """The tools in a provider's format ("anthropic": input_schema; "openai": function tools)."""
    ms = default_timeout_ms
    env = ""
    if installed:
        env += " Installed: " + installed.rstrip(".") + "."
    env += (f" The working directory is {working_dir}; files written and packages installed there persist between"
            " calls within this conversation.")
    env += (" Stdin is closed, so interactive commands (prompts, editors, REPLs) wait and time out: pass"
            " non-interactive flags such as -y.")
    if network == "none":
        env += " The sandbox has no network access: downloads (pip install, npm install, curl) fail."
    elif network == "restricted":
        env += " Network access is restricted to the destinations the platform allows; others fail."
    env += (" The result gives the exit code, then the end of stderr and stdout; long output keeps its tail"
            " and names the file in the sandbox with all of it.")
    timeout = {"type": "integer", "minimum": 1, "default": ms,
               "description": f"Time limit in milliseconds (default {ms}); at the limit the command and everything it started are killed."}
    tools = [
        ("run_command", f"Run one shell command (sh -c) in a Linux sandbox, time limit {ms} ms unless timeout_ms says otherwise." + env,
         {"type": "object", "required": ["command"], "properties": {
             "command": {"type": "string", "description": "The shell command to run."}, "timeout_ms": timeout}}),
        ("run_python", f"Run a Python program in a Linux sandbox (written to a file and run with python3), time limit {ms} ms; print what you need to see." + env,
         {"type": "object", "required": ["code"], "properties": {
             "code": {"type": "string", "description": "The complete Python program."}}}),
    ]
    if format == "anthropic":
        return [{"name": n, "description": d, "input_schema": s} for n, d, s in tools]
    if format == "openai":
        return [{"type": "function", "function": {"name": n, "description": d, "parameters": s}} for n, d, s in tools]
    raise ValueError(f"tool format {format!r}: want 'anthropic' or 'openai'")
