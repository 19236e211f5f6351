"""An OpenAI Chat Completions tool loop on Airlock: one sandbox per conversation, deleted at the end.

With the official client: run(openai.OpenAI(), "...") (pip install openai; OPENAI_API_KEY).
"""

from airlock import Sandbox


def run(client, task, model="gpt-4.1", max_steps=10):
    with Sandbox.create(network="restricted") as sbx:  # always deleted, also on an exception
        tools = sbx.tools("openai")
        messages = [{"role": "user", "content": task}]
        for _ in range(max_steps):
            msg = client.chat.completions.create(model=model, tools=tools, messages=messages).choices[0].message
            messages.append({"role": "assistant", "content": msg.content, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in msg.tool_calls or []]})
            if not msg.tool_calls:
                return msg.content
            for c in msg.tool_calls:
                messages.append({"role": "tool", "tool_call_id": c.id, "content": sbx.run_tool(c.function.name, c.function.arguments)})
    raise RuntimeError(f"no answer after {max_steps} steps")
