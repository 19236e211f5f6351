"""The asynchronous client: AsyncSandbox (the same surface as Sandbox, awaited)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import httpx

from . import _core
from .errors import AirlockError, ExecTimeout, NotFoundError, from_response, retryable
from .observation import DEFAULT_MAX_CHARS, format_observation
from .tools import DEFAULT_TIMEOUT_MS, RUN_PYTHON_FILE

Callback = Callable[[str], Any]


class _AsyncClient:
    def __init__(self, cfg: _core.Config) -> None:
        self.cfg = cfg
        self.http = httpx.AsyncClient(base_url=cfg.base_url, headers=cfg.headers(), timeout=_core.HTTP_TIMEOUT)

    async def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One call; 429 (not quota) and 503 are retried: the gateway refused before doing anything."""
        for attempt in range(_core.MAX_RETRIES + 1):
            resp = await self.http.request(method, path, **kw)
            try:
                _core.check(resp)
                return resp
            except AirlockError as e:
                if not retryable(e) or attempt == _core.MAX_RETRIES:
                    raise
                await asyncio.sleep(_core.backoff(attempt, e))
        raise AssertionError("unreachable")

    async def stream(self, path: str, body: Dict[str, Any], timeout: httpx.Timeout, on_stdout, on_stderr) -> Dict[str, Any]:
        for attempt in range(_core.MAX_RETRIES + 1):
            async with self.http.stream("POST", path, json=body, timeout=timeout,
                                  headers={"Accept": "application/x-ndjson"}) as resp:
                if resp.status_code >= 300:
                    e = from_response(resp.status_code, await resp.aread(), resp.headers)
                    if not retryable(e) or attempt == _core.MAX_RETRIES:
                        raise e
                    await asyncio.sleep(_core.backoff(attempt, e))
                    continue
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    d = _core.parse_line(line)
                    if "exit_code" in d:
                        return d
                    cb = on_stdout if d.get("stream") == "stdout" else on_stderr
                    if cb is not None:
                        r = cb(d.get("data", ""))
                        if inspect.isawaitable(r):
                            await r
                raise AirlockError(502, "sandbox_lost", "exec stream ended without a result")
        raise AssertionError("unreachable")


class AsyncFiles:
    """Files in the sandbox: relative paths are relative to the working directory; absolute ones may be
    anywhere the sandbox user may write."""

    def __init__(self, sbx: "AsyncSandbox") -> None:
        self._sbx = sbx

    async def write(self, path: str, data: Union[str, bytes]) -> None:
        """Replace the file atomically; parent directories are created."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        await self._sbx._c.request("PUT", self._sbx._path("/files"), params={"path": path}, content=data,
                             headers={"Content-Type": "application/octet-stream"})

    async def read(self, path: str) -> bytes:
        return (await self._sbx._c.request("GET", self._sbx._path("/files"), params={"path": path})).content

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def list(self, path: str = ".") -> List[_core.FileInfo]:
        return _core.parse_list(path, await self._sbx._run(argv=_core.list_argv(path)))

    async def exists(self, path: str) -> bool:
        res = await self._sbx._run(argv=["test", "-e", path])
        if res.outcome != "exited":
            _core.check_file_op(path, res)
        return res.exit_code == 0

    async def remove(self, path: str) -> None:
        """Delete a file or a directory with everything in it; a missing path is not an error."""
        _core.check_file_op(path, await self._sbx._run(argv=["rm", "-rf", "--", path]))


class AsyncSandbox:
    """One sandbox, async. Use as an async context manager: it is always deleted at the end."""

    def __init__(self, id: str, client: _AsyncClient) -> None:
        self.id = id
        self._c = client
        self.files = AsyncFiles(self)

    @classmethod
    async def create(cls, template: Optional[str] = None, size: Optional[str] = None, timeout_minutes: Optional[int] = None,
               network: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, api_key: Optional[str] = None,
               base_url: Optional[str] = None,
               idle_timeout_minutes: Optional[int] = None,
               secrets: Optional[Dict[str, str]] = None) -> "AsyncSandbox":
        """Create a sandbox and wait until it is Ready. network: "none" (or "off") or "restricted".

        idle_timeout_minutes: expire after that long without a command, file transfer or running background
        process (the hard timeout still caps the total). secrets: like env, for this sandbox only, kept in a
        Secret that goes with it and masked as [masked:NAME] in returned output."""
        c = _AsyncClient(_core.Config.resolve(api_key, base_url))
        body = _core.create_body(template, size, timeout_minutes, network, env, metadata, idle_timeout_minutes, secrets)
        try:
            return cls((await c.request("POST", "/v1/sandboxes", json=body)).json()["id"], c)
        except BaseException:
            await c.http.aclose()
            raise

    @classmethod
    async def connect(cls, id: str, api_key: Optional[str] = None, base_url: Optional[str] = None) -> "AsyncSandbox":
        sbx = cls(id, _AsyncClient(_core.Config.resolve(api_key, base_url)))
        try:
            await sbx.info()
        except BaseException:
            await sbx.close()
            raise
        return sbx

    @classmethod
    async def list(cls, api_key: Optional[str] = None, base_url: Optional[str] = None) -> List[_core.SandboxInfo]:
        c = _AsyncClient(_core.Config.resolve(api_key, base_url))
        try:
            return [_core.SandboxInfo.from_json(d) for d in (await c.request("GET", "/v1/sandboxes")).json()["sandboxes"]]
        finally:
            await c.http.aclose()

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{suffix}"

    async def exec(self, command: str, timeout_seconds: float = 60, cwd: Optional[str] = None,
             env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
             max_output_bytes: Optional[int] = None, on_stdout: Optional[Callback] = None,
             on_stderr: Optional[Callback] = None, raise_on_timeout: bool = False) -> _core.ExecResult:
        """Run a shell command. Callbacks receive output as it arrives."""
        return await self._run(command, None, timeout_seconds, cwd, env, stdin, max_output_bytes, on_stdout, on_stderr,
                         raise_on_timeout)

    async def _run(self, command: Optional[str] = None, argv: Optional[Sequence[str]] = None, timeout_seconds: float = 60,
             cwd=None, env=None, stdin=None, max_output_bytes=None, on_stdout=None, on_stderr=None,
             raise_on_timeout: bool = False) -> _core.ExecResult:
        body = _core.exec_body(command, argv, timeout_seconds, cwd, env, stdin, max_output_bytes)
        timeout = _core.exec_timeout(timeout_seconds)
        if on_stdout is not None or on_stderr is not None:
            raw = await self._c.stream(self._path("/exec"), body, timeout, on_stdout, on_stderr)
        else:
            raw = (await self._c.request("POST", self._path("/exec"), json=body, timeout=timeout)).json()
        res = _core.ExecResult.from_json(raw)
        if raise_on_timeout and res.outcome == "timeout":
            raise ExecTimeout(res)
        return res

    async def info(self) -> _core.SandboxInfo:
        return _core.SandboxInfo.from_json((await self._c.request("GET", self._path())).json())

    async def set_timeout(self, minutes: int) -> None:
        """Set the total lifetime, from creation, to minutes (only up, at most max_timeout_minutes)."""
        await self._c.request("POST", self._path("/timeout"), json={"timeout_minutes": minutes})

    async def terminate(self) -> None:
        """Delete the sandbox; idempotent."""
        try:
            await self._c.request("DELETE", self._path())
        except NotFoundError:
            pass

    kill = terminate
    delete = terminate

    async def tools(self, format: str = "anthropic", template: Optional[str] = None) -> List[Dict[str, Any]]:
        """The gateway's tool definitions for a template (default: the default template)."""
        params = {"format": format}
        if template:
            params["template"] = template
        return (await self._c.request("GET", "/v1/tools", params=params)).json()["tools"]

    async def run_tool(self, name: str, input: Any, max_chars: int = DEFAULT_MAX_CHARS) -> str:
        """Run a model's run_command or run_python call (dict or JSON string); return the observation."""
        args = _core.tool_input(name, input)
        timeout = args.get("timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        if name == "run_command":
            res = await self.exec(args["command"], timeout_seconds=timeout)
        else:
            await self.files.write(RUN_PYTHON_FILE, args["code"])
            res = await self._run(argv=["python3", RUN_PYTHON_FILE], timeout_seconds=timeout)
        return format_observation(res, max_chars=max_chars)

    async def close(self) -> None:
        await self._c.http.aclose()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.terminate()
        finally:
            await self.close()
