"""Airlock SDK: disposable sandboxes for AI agents, over Airlock's exec gateway."""

from ._async import AsyncSandbox
from ._core import ExecResult, FileInfo, SandboxInfo
from ._sync import Sandbox
from ._version import __version__
from .errors import (AirlockError, AuthenticationError, ClusterUnavailableError, ExecTimeout, InvalidRequestError,
                     NotFoundError, QuotaExceededError, RateLimitedError, SandboxLostError, SandboxNotReadyError)
from .observation import format_observation
from .tools import tool_definitions

__all__ = [
    "AirlockError", "AsyncSandbox", "AuthenticationError", "ClusterUnavailableError", "ExecResult", "ExecTimeout",
    "FileInfo", "InvalidRequestError", "NotFoundError", "QuotaExceededError", "RateLimitedError", "Sandbox",
    "SandboxInfo", "SandboxLostError", "SandboxNotReadyError", "__version__", "format_observation",
    "tool_definitions",
]
