"""Typed errors: a call the gateway refused, or a command that timed out when asked to raise."""

from __future__ import annotations

from typing import Any, Optional


class AirlockError(Exception):
    """The gateway's error answer: {"error": {"code", "message", "field"?, "phase"?, "reason"?}}."""

    def __init__(self, status: int, code: str, message: str, field: Optional[str] = None,
                 phase: Optional[str] = None, reason: Optional[str] = None,
                 retry_after: Optional[float] = None) -> None:
        text = f"{status} {code}: {message}" + (f" (field {field})" if field else "")
        super().__init__(text)
        self.status, self.code, self.message = status, code, message
        self.field, self.phase, self.reason, self.retry_after = field, phase, reason, retry_after


class AuthenticationError(AirlockError):
    """401: the key is missing, wrong or revoked; 403: its namespace is no tenant."""


class NotFoundError(AirlockError):
    """No such sandbox (or another tenant's), or no such file."""


class QuotaExceededError(AirlockError):
    """The tenant already has as many sandboxes as its quota allows."""


class RateLimitedError(AirlockError):
    """Too many calls for now (429); retry_after says when to try again."""


class SandboxNotReadyError(AirlockError):
    """The sandbox is not Ready (yet, or any more); phase and reason say why."""


class SandboxLostError(AirlockError):
    """The sandbox stopped answering during a file transfer (502)."""


class ClusterUnavailableError(AirlockError):
    """The gateway or the cluster behind it cannot serve now (503)."""


class InvalidRequestError(AirlockError):
    """The gateway refused the input (400, 413); field names it."""


class ExecTimeout(AirlockError):
    """A command timed out and the caller asked for an exception (raise_on_timeout=True); result has the output."""

    def __init__(self, result: Any) -> None:
        super().__init__(200, "timeout", f"command timed out after {result.duration_ms} ms")
        self.result = result


def error_class(status: int, code: str) -> type:
    if status in (401, 403):
        return AuthenticationError
    if status == 404:
        return NotFoundError
    if code == "quota_exceeded":
        return QuotaExceededError
    if status == 429:
        return RateLimitedError
    if code == "sandbox_not_ready":
        return SandboxNotReadyError
    if code == "sandbox_lost" or status == 502:
        return SandboxLostError
    if status == 503:
        return ClusterUnavailableError
    if status in (400, 413):
        return InvalidRequestError
    return AirlockError


def from_response(status: int, body: bytes, headers: Any) -> AirlockError:
    import json

    err: dict = {}
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            err = parsed["error"]
    except ValueError:
        pass
    code = err.get("code") or f"http_{status}"
    message = err.get("message") or body.decode("utf-8", "replace").strip()
    retry = headers.get("retry-after")
    retry_after = float(retry) if retry and retry.isdigit() else None
    cls = error_class(status, code)
    return cls(status, code, message, err.get("field"), err.get("phase"), err.get("reason"), retry_after)


def retryable(e: AirlockError) -> bool:
    """The gateway refused before doing anything and waiting may help (a full quota does not clear soon)."""
    return (e.status == 429 and e.code != "quota_exceeded") or e.status == 503
