"""The two loops against the real gateway with scripted models (run by test/e2e/sdk_e2e_test.go)."""

import os

import pytest

import anthropic_loop
import openai_loop
from airlock import Sandbox
from scripted import ScriptedAnthropic, ScriptedOpenAI

pytestmark = pytest.mark.skipif(not os.environ.get("AIRLOCK_API_URL"), reason="needs AIRLOCK_API_URL and AIRLOCK_API_KEY")


@pytest.mark.parametrize("loop,model", [(anthropic_loop, ScriptedAnthropic), (openai_loop, ScriptedOpenAI)])
def test_loop_fixes_the_bug(loop, model):
    before = {s.id for s in Sandbox.list()}
    m = model()
    answer = loop.run(m, "What is the 1000th prime? Compute it.")
    assert "7919" in answer
    assert len(m.tool_results) == 2
    first, second = m.tool_results
    assert first.startswith("exit_code: 1\n") and "Traceback (most recent call last):" in first
    assert "IndexError: list index out of range" in first
    assert second.startswith("exit_code: 0\n") and second.endswith("stdout:\n7919")
    tools = m.requests[0]["tools"]
    names = [t["name"] if "name" in t else t["function"]["name"] for t in tools]
    assert names == ["run_command", "run_python"]
    # The conversation's sandbox is gone (or going).
    left = [s for s in Sandbox.list() if s.id not in before and s.status != "terminating"]
    assert not left
