"""Scripted models in the shapes of the Anthropic Messages and OpenAI Chat Completions APIs (no model is
reachable here). The script: write a program with a bug, read the traceback, fix it, answer the 1000th prime.
Each records what it received, so a test can check what a real model would have seen."""

import json
from types import SimpleNamespace

BUGGY = """primes = []
n = 2
while len(primes) < 1000:
    if all(n % p for p in primes if p * p <= n):
        primes.append(n)
    n += 1
print(primes[1000])
"""
FIXED = BUGGY.replace("primes[1000]", "primes[999]")


def _ns(d):
    """Objects with attributes, as the official clients return; a tool call's input stays a dict, as there."""
    if isinstance(d, dict):
        return SimpleNamespace(**{k: v if k == "input" else _ns(v) for k, v in d.items()})
    if isinstance(d, list):
        return [_ns(v) for v in d]
    return d


def _step(received):
    """What the model does next, from the tool results it has seen (newest last)."""
    if not received:
        return ("tool", BUGGY)
    last = received[-1]
    if "Traceback" in last and "IndexError" in last:
        return ("tool", FIXED)
    answer = last.rsplit("stdout:\n", 1)[-1].strip()
    return ("answer", f"The 1000th prime is {answer}.")


class ScriptedAnthropic:
    def __init__(self):
        self.requests, self.tool_results = [], []
        self.messages = self

    def create(self, **kw):
        self.requests.append(kw)
        last = kw["messages"][-1]
        if isinstance(last["content"], list):
            self.tool_results += [b["content"] for b in last["content"] if b.get("type") == "tool_result"]
        kind, text = _step(self.tool_results)
        n = len(self.requests)
        if kind == "tool":
            content = [{"type": "text", "text": "Let me compute it."},
                       {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "run_python", "input": {"code": text}}]
            return _ns({"id": f"msg_{n}", "type": "message", "role": "assistant", "content": content,
                        "stop_reason": "tool_use"})
        return _ns({"id": f"msg_{n}", "type": "message", "role": "assistant",
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})


class ScriptedOpenAI:
    def __init__(self):
        self.requests, self.tool_results = [], []
        self.chat = SimpleNamespace(completions=self)

    def create(self, **kw):
        self.requests.append(kw)
        self.tool_results = [m["content"] for m in kw["messages"] if m["role"] == "tool"]
        kind, text = _step(self.tool_results)
        n = len(self.requests)
        if kind == "tool":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{n:02d}", "type": "function",
                 "function": {"name": "run_python", "arguments": json.dumps({"code": text})}}]}
            finish = "tool_calls"
        else:
            msg, finish = {"role": "assistant", "content": text, "tool_calls": None}, "stop"
        return _ns({"id": f"chatcmpl-{n}", "object": "chat.completion",
                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})
