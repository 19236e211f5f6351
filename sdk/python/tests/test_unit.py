"""Unit tests: no gateway needed."""

import glob
import json
import os
import re

import pytest

import airlock
from airlock import _core, errors, format_observation, tool_definitions

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "sdk", "testdata", "observation", "*.json"))))
def test_observation_golden(path):
    v = json.load(open(path, encoding="utf-8"))
    assert format_observation(v["result"], **v["options"]) == v["expected"]
    # The SDK's own result object gives the same text as the gateway's JSON.
    assert format_observation(_core.ExecResult.from_json(v["result"]), **v["options"]) == v["expected"]


def test_goldens_present():
    assert len(glob.glob(os.path.join(ROOT, "sdk", "testdata", "observation", "*.json"))) >= 10


def test_version_follows_makefile():
    m = re.search(r"^VERSION \?= (\S+)$", open(os.path.join(ROOT, "Makefile")).read(), re.M)
    assert m and airlock.__version__ == m.group(1), "update sdk/python/airlock/_version.py to the Makefile's VERSION"


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("AIRLOCK_API_URL", "http://gw.example/v1/")
    monkeypatch.setenv("AIRLOCK_API_KEY", "alk_x_y")
    cfg = _core.Config.resolve(None, None)
    assert (cfg.base_url, cfg.api_key) == ("http://gw.example", "alk_x_y")
    monkeypatch.delenv("AIRLOCK_API_KEY")
    with pytest.raises(ValueError):
        _core.Config.resolve(None, None)


def test_timeout_result_is_124():
    r = _core.ExecResult.from_json({"exit_code": -1, "outcome": "timeout", "signal": "SIGKILL", "stdout": "x"})
    assert (r.exit_code, r.outcome, r.stdout) == (124, "timeout", "x")


@pytest.mark.parametrize("status,code,cls", [
    (401, "unauthenticated", errors.AuthenticationError), (404, "not_found", errors.NotFoundError),
    (429, "quota_exceeded", errors.QuotaExceededError), (429, "rate_limited", errors.RateLimitedError),
    (409, "sandbox_not_ready", errors.SandboxNotReadyError), (502, "sandbox_lost", errors.SandboxLostError),
    (503, "cluster_unavailable", errors.ClusterUnavailableError), (400, "invalid_request", errors.InvalidRequestError),
])
def test_error_classes(status, code, cls):
    body = json.dumps({"error": {"code": code, "message": "m", "field": "size"}}).encode()
    e = errors.from_response(status, body, {"retry-after": "3"})
    assert type(e) is cls and e.code == code and e.field == "size" and e.retry_after == 3.0
    assert errors.retryable(e) == (cls in (errors.RateLimitedError, errors.ClusterUnavailableError))


def test_create_body_network_off():
    assert _core.create_body(None, "small", 30, "off", None, None) == {"size": "small", "timeout_minutes": 30, "network": "none"}


def test_create_body_idle_timeout_and_secrets():
    assert _core.create_body("py", None, None, None, {"A": "1"}, None, 10, {"GIT_TOKEN": "t0ken"}) == {
        "template": "py", "idle_timeout_minutes": 10, "env": {"A": "1"}, "secrets": {"GIT_TOKEN": "t0ken"}}


def test_tool_definitions():
    a = tool_definitions("anthropic", installed="Python 3.11", network="none")
    assert [t["name"] for t in a] == ["run_command", "run_python"] and "input_schema" in a[0]
    for want in ("Python 3.11", "/home/sandbox", "persist", "Stdin is closed", "60000", "no network"):
        assert want in a[0]["description"]
    o = tool_definitions("openai")
    assert o[1]["type"] == "function" and o[1]["function"]["parameters"]["required"] == ["code"]
    with pytest.raises(ValueError):
        tool_definitions("vercel")
