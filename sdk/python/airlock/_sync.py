"""The synchronous client: Sandbox."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import httpx

from . import _core
from .errors import AirlockError, ExecTimeout, NotFoundError, from_response, retryable
from .observation import DEFAULT_MAX_CHARS, format_observation
from .tools import DEFAULT_TIMEOUT_MS, RUN_PYTHON_FILE

Callback = Callable[[str], Any]


class _Client:
    def __init__(self, cfg: _core.Config) -> None:
        self.cfg = cfg
        self.http = httpx.Client(base_url=cfg.base_url, headers=cfg.headers(), timeout=_core.HTTP_TIMEOUT)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One call; 429 (not quota) and 503 are retried: the gateway refused before doing anything."""
        for attempt in range(_core.MAX_RETRIES + 1):
            resp = self.http.request(method, path, **kw)
            try:
                _core.check(resp)
                return resp
            except AirlockError as e:
                if not retryable(e) or attempt == _core.MAX_RETRIES:
                    raise
                time.sleep(_core.backoff(attempt, e))
        raise AssertionError("unreachable")

    def stream(self, path: str, body: Dict[str, Any], timeout: httpx.Timeout, on_stdout, on_stderr) -> Dict[str, Any]:
        for attempt in range(_core.MAX_RETRIES + 1):
            with self.http.stream("POST", path, json=body, timeout=timeout,
                                  headers={"Accept": "application/x-ndjson"}) as resp:
                if resp.status_code >= 300:
                    e = from_response(resp.status_code, resp.read(), resp.headers)
                    if not retryable(e) or attempt == _core.MAX_RETRIES:
                        raise e
                    time.sleep(_core.backoff(attempt, e))
                    continue
                for line in resp.iter_lines():
                    if not line.strip():
                        continue
                    d = _core.parse_line(line)
                    if "exit_code" in d:
                        return d
                    cb = on_stdout if d.get("stream") == "stdout" else on_stderr
                    if cb is not None:
                        cb(d.get("data", ""))
                raise AirlockError(502, "sandbox_lost", "exec stream ended without a result")
        raise AssertionError("unreachable")


class Files:
    """Files in the sandbox: relative paths are relative to the working directory; absolute ones may be
    anywhere the sandbox user may write."""

    def __init__(self, sbx: "Sandbox") -> None:
        self._sbx = sbx

    def write(self, path: str, data: Union[str, bytes]) -> None:
        """Replace the file atomically; parent directories are created."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._sbx._c.request("PUT", self._sbx._path("/files"), params={"path": path}, content=data,
                             headers={"Content-Type": "application/octet-stream"})

    def read(self, path: str) -> bytes:
        return self._sbx._c.request("GET", self._sbx._path("/files"), params={"path": path}).content

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str = ".") -> List[_core.FileInfo]:
        return _core.parse_list(path, self._sbx._run(argv=_core.list_argv(path)))

    def exists(self, path: str) -> bool:
        res = self._sbx._run(argv=["test", "-e", path])
        if res.outcome != "exited":
            _core.check_file_op(path, res)
        return res.exit_code == 0

    def remove(self, path: str) -> None:
        """Delete a file or a directory with everything in it; a missing path is not an error."""
        _core.check_file_op(path, self._sbx._run(argv=["rm", "-rf", "--", path]))


class Sandbox:
    """One sandbox. Use as a context manager: it is always deleted at the end."""

    def __init__(self, id: str, client: _Client) -> None:
        self.id = id
        self._c = client
        self.files = Files(self)

    @classmethod
    def create(cls, template: Optional[str] = None, size: Optional[str] = None, timeout_minutes: Optional[int] = None,
               network: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, api_key: Optional[str] = None,
               base_url: Optional[str] = None,
               idle_timeout_minutes: Optional[int] = None,
               secrets: Optional[Dict[str, str]] = None) -> "Sandbox":
        """Create a sandbox and wait until it is Ready. network: "none" (or "off") or "restricted".

        idle_timeout_minutes: expire after that long without a command, file transfer or running background
        process (the hard timeout still caps the total). secrets: like env, for this sandbox only, kept in a
        Secret that goes with it and masked as [masked:NAME] in returned output."""
        c = _Client(_core.Config.resolve(api_key, base_url))
        body = _core.create_body(template, size, timeout_minutes, network, env, metadata, idle_timeout_minutes, secrets)
        try:
            return cls(c.request("POST", "/v1/sandboxes", json=body).json()["id"], c)
        except BaseException:
            c.http.close()
            raise

    @classmethod
    def connect(cls, id: str, api_key: Optional[str] = None, base_url: Optional[str] = None) -> "Sandbox":
        sbx = cls(id, _Client(_core.Config.resolve(api_key, base_url)))
        try:
            sbx.info()
        except BaseException:
            sbx.close()
            raise
        return sbx

    @classmethod
    def list(cls, api_key: Optional[str] = None, base_url: Optional[str] = None) -> List[_core.SandboxInfo]:
        c = _Client(_core.Config.resolve(api_key, base_url))
        try:
            return [_core.SandboxInfo.from_json(d) for d in c.request("GET", "/v1/sandboxes").json()["sandboxes"]]
        finally:
            c.http.close()

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{suffix}"

    def exec(self, command: str, timeout_seconds: float = 60, cwd: Optional[str] = None,
             env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
             max_output_bytes: Optional[int] = None, on_stdout: Optional[Callback] = None,
             on_stderr: Optional[Callback] = None, raise_on_timeout: bool = False) -> _core.ExecResult:
        """Run a shell command. Callbacks receive output as it arrives."""
        return self._run(command, None, timeout_seconds, cwd, env, stdin, max_output_bytes, on_stdout, on_stderr,
                         raise_on_timeout)

    def _run(self, command: Optional[str] = None, argv: Optional[Sequence[str]] = None, timeout_seconds: float = 60,
             cwd=None, env=None, stdin=None, max_output_bytes=None, on_stdout=None, on_stderr=None,
             raise_on_timeout: bool = False) -> _core.ExecResult:
        body = _core.exec_body(command, argv, timeout_seconds, cwd, env, stdin, max_output_bytes)
        timeout = _core.exec_timeout(timeout_seconds)
        if on_stdout is not None or on_stderr is not None:
            raw = self._c.stream(self._path("/exec"), body, timeout, on_stdout, on_stderr)
        else:
            raw = self._c.request("POST", self._path("/exec"), json=body, timeout=timeout).json()
        res = _core.ExecResult.from_json(raw)
        if raise_on_timeout and res.outcome == "timeout":
            raise ExecTimeout(res)
        return res

    def info(self) -> _core.SandboxInfo:
        return _core.SandboxInfo.from_json(self._c.request("GET", self._path()).json())

    def set_timeout(self, minutes: int) -> None:
        """Set the total lifetime, from creation, to minutes (only up, at most max_timeout_minutes)."""
        self._c.request("POST", self._path("/timeout"), json={"timeout_minutes": minutes})

    def terminate(self) -> None:
        """Delete the sandbox; idempotent."""
        try:
            self._c.request("DELETE", self._path())
        except NotFoundError:
            pass

    kill = terminate
    delete = terminate

    def tools(self, format: str = "anthropic", template: Optional[str] = None) -> List[Dict[str, Any]]:
        """The gateway's tool definitions for a template (default: the default template)."""
        params = {"format": format}
        if template:
            params["template"] = template
        return self._c.request("GET", "/v1/tools", params=params).json()["tools"]

    def run_tool(self, name: str, input: Any, max_chars: int = DEFAULT_MAX_CHARS) -> str:
        """Run a model's run_command or run_python call (dict or JSON string); return the observation."""
        args = _core.tool_input(name, input)
        timeout = args.get("timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        if name == "run_command":
            res = self.exec(args["command"], timeout_seconds=timeout)
        else:
            self.files.write(RUN_PYTHON_FILE, args["code"])
            res = self._run(argv=["python3", RUN_PYTHON_FILE], timeout_seconds=timeout)
        return format_observation(res, max_chars=max_chars)

    def close(self) -> None:
        self._c.http.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.terminate()
        finally:
            self.close()
