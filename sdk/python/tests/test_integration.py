"""Against a real gateway: run by test/e2e/sdk_e2e_test.go with AIRLOCK_API_URL and AIRLOCK_API_KEY set."""

import asyncio
import os

import pytest

from airlock import AsyncSandbox, ExecTimeout, NotFoundError, Sandbox, format_observation

pytestmark = pytest.mark.skipif(not os.environ.get("AIRLOCK_API_URL"), reason="needs AIRLOCK_API_URL and AIRLOCK_API_KEY")


def test_sandbox_end_to_end():
    with Sandbox.create(network="restricted", timeout_minutes=10) as sbx:
        sid = sbx.id
        assert sbx.info().status == "ready"
        # The tool executor, unchanged.
        sbx.files.write("/workspace/tool_call.py", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n")
        r = sbx.exec("python /workspace/tool_call.py", timeout_seconds=60)
        assert (r.exit_code, r.stdout, r.stderr, r.outcome) == (3, "out\n", "err\n", "exited")
        assert sbx.files.read_text("tool_call.py").startswith("import sys")  # /workspace is the working directory

        chunks = []
        r = sbx.exec("for i in 1 2 3; do echo $i; sleep 0.2; done; echo e >&2", on_stdout=chunks.append,
                     on_stderr=lambda s: chunks.append("E:" + s))
        assert r.exit_code == 0 and "".join(c for c in chunks if not c.startswith("E:")) == "1\n2\n3\n"
        assert "".join(c[2:] for c in chunks if c.startswith("E:")) == "e\n" and len(chunks) >= 3

        r = sbx.exec("echo started; sleep 30", timeout_seconds=1)
        assert (r.exit_code, r.outcome, r.stdout) == (124, "timeout", "started\n")
        assert format_observation(r).startswith("exit_code: 124\n")
        with pytest.raises(ExecTimeout) as ei:
            sbx.exec("sleep 30", timeout_seconds=1, raise_on_timeout=True)
        assert ei.value.result.exit_code == 124

        sbx.files.write("deep/er/data.bin", bytes(range(256)))
        assert sbx.files.read("deep/er/data.bin") == bytes(range(256))
        assert sbx.files.exists("/home/sandbox/deep/er/data.bin")
        names = {f.name: f for f in sbx.files.list("deep/er")}
        assert names["data.bin"].size == 256 and not names["data.bin"].is_dir
        sbx.files.remove("deep")
        assert not sbx.files.exists("deep")
        with pytest.raises(NotFoundError):
            sbx.files.read("deep/er/data.bin")
        r = sbx.exec("python -c 'import sys; print(sys.version_info[0])'")
        assert r.stdout == "3\n"
        assert any(s.id == sid for s in Sandbox.list())
        tools = sbx.tools("openai")
        assert [t["function"]["name"] for t in tools] == ["run_command", "run_python"]
        obs = sbx.run_tool("run_python", {"code": "print(6*7)"})
        assert obs.endswith("stdout:\n42") and obs.startswith("exit_code: 0\n")
    # The context manager deleted it; a second terminate is harmless.
    with pytest.raises(NotFoundError):
        Sandbox.connect("sbx-does-not-exist")
    gone = Sandbox.list()
    assert all(s.id != sid or s.status == "terminating" for s in gone)


def test_context_manager_deletes_on_error():
    sid = None
    with pytest.raises(RuntimeError):
        with Sandbox.create() as sbx:
            sid = sbx.id
            raise RuntimeError("agent crashed")
    assert all(s.id != sid or s.status == "terminating" for s in Sandbox.list())


def test_async_sandbox():
    async def main():
        async with await AsyncSandbox.create() as sbx:
            got = []

            async def on_out(s):
                got.append(s)

            r = await sbx.exec("echo a; echo b", on_stdout=on_out)
            assert r.exit_code == 0 and "".join(got) == "a\nb\n"
            await sbx.files.write("/workspace/x.txt", "hi")
            assert await sbx.files.read_text("x.txt") == "hi"
            r = await sbx.exec("sleep 10", timeout_seconds=1)
            assert (r.exit_code, r.outcome) == (124, "timeout")
            return sbx.id

    sid = asyncio.run(main())
    assert all(s.id != sid or s.status == "terminating" for s in Sandbox.list())
