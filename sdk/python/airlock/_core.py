"""What the sync and async clients share: configuration, request bodies, results, retries."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

import httpx

from ._version import __version__
from .errors import AirlockError, SandboxLostError, NotFoundError, from_response

EXIT_TIMEOUT = 124
MAX_RETRIES = 4
MAX_BACKOFF = 30.0


@dataclass
class ExecResult:
    """What a command did. A non-zero exit is a result; a timeout too (exit_code 124, outcome "timeout")."""

    exit_code: int
    stdout: str
    stderr: str
    outcome: str
    truncated: bool = False
    truncation: Dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0
    signal: Optional[str] = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    output_incomplete: bool = False
    detail: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        outcome = d.get("outcome") or "exited"
        # The gateway reports a timed-out command's killed status (often -1); exit_code alone must read as failure.
        code = EXIT_TIMEOUT if outcome == "timeout" else int(d.get("exit_code", -1))
        return cls(exit_code=code, stdout=d.get("stdout", ""), stderr=d.get("stderr", ""), outcome=outcome,
                   truncated=bool(d.get("truncated")), truncation=d.get("truncation") or {},
                   duration_ms=int(d.get("duration_ms", 0)), signal=d.get("signal") or None,
                   stdout_bytes=int(d.get("stdout_bytes", 0)), stderr_bytes=int(d.get("stderr_bytes", 0)),
                   output_incomplete=bool(d.get("output_incomplete")), detail=d.get("detail") or None)


@dataclass
class SandboxInfo:
    """A sandbox as the gateway shows it (raw keeps every field)."""

    id: str
    status: str
    working_dir: str = ""
    template: Optional[str] = None
    network: Optional[str] = None
    expires_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(id=d["id"], status=d.get("status", ""), working_dir=d.get("working_dir", ""),
                   template=d.get("template"), network=d.get("network"), expires_at=d.get("expires_at"), raw=dict(d))


@dataclass
class FileInfo:
    name: str
    path: str
    is_dir: bool
    type: str
    size: int


@dataclass
class Config:
    base_url: str
    api_key: str

    @classmethod
    def resolve(cls, api_key: Optional[str], base_url: Optional[str]) -> "Config":
        key = api_key or os.environ.get("AIRLOCK_API_KEY")
        url = base_url or os.environ.get("AIRLOCK_API_URL")
        if not url:
            raise ValueError("no gateway URL: pass base_url or set AIRLOCK_API_URL")
        if not key:
            raise ValueError("no API key: pass api_key or set AIRLOCK_API_KEY")
        url = url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"gateway URL {url!r} is not an http(s) URL")
        return cls(url, key)

    def headers(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "User-Agent": f"airlock-sdk-python/{__version__}"}


# Generous read timeout: create waits for Ready (60 s by default); exec sets its own.
HTTP_TIMEOUT = httpx.Timeout(30.0, read=180.0)


def exec_timeout(timeout_seconds: float) -> httpx.Timeout:
    # The gateway answers within the command's timeout plus its grace; give the network a minute more.
    return httpx.Timeout(30.0, read=timeout_seconds + 90.0)


def create_body(template, size, timeout_minutes, network, env, metadata, idle_timeout_minutes=None,
                secrets=None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if network == "off":
        network = "none"
    for k, v in (("template", template), ("size", size), ("timeout_minutes", timeout_minutes),
                 ("idle_timeout_minutes", idle_timeout_minutes), ("network", network), ("env", env),
                 ("secrets", secrets), ("metadata", metadata)):
        if v is not None:
            body[k] = v
    return body


def exec_body(command, argv, timeout_seconds, cwd, env, stdin, max_output_bytes) -> Dict[str, Any]:
    body: Dict[str, Any] = {"timeout_ms": int(timeout_seconds * 1000)}
    if argv is not None:
        body["argv"] = list(argv)
    else:
        body["command"] = command
    for k, v in (("cwd", cwd), ("env", env), ("stdin", stdin), ("max_output_bytes", max_output_bytes)):
        if v is not None:
            body[k] = v
    return body


def backoff(attempt: int, err: AirlockError) -> float:
    return min(max(err.retry_after or 0.0, 0.5 * (2 ** attempt)), MAX_BACKOFF)


def check(resp: httpx.Response) -> None:
    """Raise the typed error for a non-2xx answer (its body must have been read)."""
    if resp.status_code >= 300:
        raise from_response(resp.status_code, resp.content, resp.headers)


def parse_line(line: str) -> Dict[str, Any]:
    d = json.loads(line)
    if isinstance(d.get("error"), dict):
        e = d["error"]
        raise from_response(500, json.dumps({"error": e}).encode(), {})
    return d


def list_argv(path: str) -> List[str]:
    return ["find", path, "-mindepth", "1", "-maxdepth", "1", "-printf", r"%y\t%s\t%f\0"]


def parse_list(path: str, res: ExecResult) -> List[FileInfo]:
    check_file_op(path, res)
    out = []
    for rec in res.stdout.rstrip("\0").split("\0"):
        parts = rec.split("\t", 2)
        if len(parts) == 3:
            out.append(FileInfo(name=parts[2], path=path.rstrip("/") + "/" + parts[2] if path != "/" else "/" + parts[2],
                                is_dir=parts[0] == "d", type=parts[0], size=int(parts[1] or 0)))
    return out


def check_file_op(path: str, res: ExecResult) -> None:
    if res.outcome != "exited":
        raise SandboxLostError(502, "sandbox_lost", f"file operation did not complete: {res.outcome} {res.detail or ''}")
    if res.exit_code != 0:
        if "No such file" in res.stderr:
            raise NotFoundError(404, "not_found", f"path: {path} does not exist", "path")
        raise AirlockError(409, "conflict", f"path: {path}: exit {res.exit_code}: {res.stderr.strip()}", "path")


def tool_input(name: str, input: Any) -> Dict[str, Any]:
    if isinstance(input, str):
        input = json.loads(input)
    if name not in ("run_command", "run_python"):
        raise ValueError(f"unknown tool {name!r}")
    return dict(input)
