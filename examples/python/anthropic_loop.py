"""An Anthropic Messages tool loop on Airlock: one sandbox per conversation, deleted at the end.

With the official client: run(anthropic.Anthropic(), "...") (pip install anthropic; ANTHROPIC_API_KEY).
"""

from airlock import Sandbox


def run(client, task, model="claude-sonnet-4-5", max_steps=10):
    with Sandbox.create(network="restricted") as sbx:  # always deleted, also on an exception
        tools = sbx.tools("anthropic")  # run_command and run_python, described for this template
        messages = [{"role": "user", "content": task}]
        for _ in range(max_steps):
            resp = client.messages.create(model=model, max_tokens=2048, tools=tools, messages=messages)
            messages.append({"role": "assistant", "content": resp.content})
            if resp.stop_reason != "tool_use":
                return "".join(b.text for b in resp.content if b.type == "text")
            results = [{"type": "tool_result", "tool_use_id": b.id, "content": sbx.run_tool(b.name, b.input)}
                       for b in resp.content if b.type == "tool_use"]
            messages.append({"role": "user", "content": results})
    raise RuntimeError(f"no answer after {max_steps} steps")
