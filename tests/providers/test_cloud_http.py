"""The shared cloud HTTP layer and credentials, against a real local server (the RunPod fake's paths).

Retries are checked through the injected sleep: the test asserts the delay the client asked for, so nothing
waits for real. Redaction is checked where a key could leak: error texts, reprs, exception chains, log
records (ours and httpx's), and bodies that echo the key back.
"""

from __future__ import annotations

import email.utils
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.credentials import ApiKey, CredentialsMissing, find_key
from remote_gpu_trainer.providers.cloud.http import (
    CloudAPIError,
    CloudAuthError,
    CloudHTTP,
    CloudNotFound,
    CloudTimeout,
    HttpOptions,
    RetryPolicy,
    auth_headers,
    provider_message,
    redact,
    redact_url,
    resolve_base_url,
)
from remote_gpu_trainer.providers.cloud.types import lower_keys, map_state
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeRunPod, Fault, Reply, VirtualTime, assert_no_key, exception_chain

runpod_fake = fake_clouds.runpod_fake
vtime = fake_clouds.vtime

WALL = 1_780_000_000.0


def make_http(fake: FakeRunPod, vtime: VirtualTime, **kwargs: object) -> CloudHTTP:
    options: dict[str, object] = {"sleep": vtime.sleep, "clock": vtime.clock, "wall_clock": lambda: WALL,
                                  "jitter": lambda: 1.0}
    options.update(kwargs)
    return CloudHTTP("runpod", fake.url, ApiKey(FAKE_KEY, "test"), HttpOptions(**options))  # type: ignore[arg-type]


@pytest.fixture
async def http(runpod_fake: FakeRunPod, vtime: VirtualTime) -> AsyncIterator[CloudHTTP]:
    client = make_http(runpod_fake, vtime)
    yield client
    await client.aclose()


# -- redaction helpers --------------------------------------------------------------------------------------

def test_redact_removes_known_secrets_headers_and_key_params() -> None:
    text = (f"failed with {FAKE_KEY} Authorization: Bearer abc.def.ghi "
            "url https://x/y?api_key=s3cr3t&page=2 token=zzz")
    out = redact(text, [FAKE_KEY])
    assert FAKE_KEY not in out
    assert "abc.def.ghi" not in out
    assert "s3cr3t" not in out and "zzz" not in out
    assert "page=2" in out  # only secret-looking params go
    assert redact("a short word", ["word"]) == "a short word"  # too short to be a key: left alone


def test_redact_url_drops_every_query_value() -> None:
    assert redact_url("/machines?after=cur-9&limit=120") == "/machines?after=…&limit=…"
    assert redact_url("/pods/p1") == "/pods/p1"


def test_auth_headers_per_scheme() -> None:
    assert auth_headers("bearer", "k") == {"Authorization": "Bearer k"}
    assert auth_headers("basic-user", "k") == {"Authorization": "Basic azo="}  # base64("k:")
    assert auth_headers("raw-header", "k") == {"Authorization": "k"}
    with pytest.raises(ValueError, match="unknown auth scheme"):
        auth_headers("query", "k")


def test_base_url_precedence_default_then_env_then_api_base() -> None:
    env = {"RUNPOD_API_URL": "https://env.example/v1/"}
    assert resolve_base_url("https://d/v1", "RUNPOD_API_URL", None, {}) == "https://d/v1"
    assert resolve_base_url("https://d/v1", "RUNPOD_API_URL", None, env) == "https://env.example/v1"
    assert resolve_base_url("https://d/v1", "RUNPOD_API_URL", "https://toml/v1", env) == "https://toml/v1"


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"error": "pod not found", "status": 404}', "pod not found"),
    (b'{"title": "Not Found", "status": 404, "detail": "resource not found"}', "Not Found: resource not found"),
    (b'{"success": false, "error": "invalid_args", "msg": "bad offer"}', "invalid_args: bad offer"),
    (b'{"error": {"code": "global/x", "message": "Nope", "suggestion": "Try"}}', "Nope: Try"),
    (b'{"code": "NOT_FOUND", "message": "Machine not found"}', "Machine not found"),
    (b'{"code": "InstanceNotFound", "msg": "gone"}', "gone"),
    (b'{"errors": [{"message": "graphql says no"}]}', "graphql says no"),
    (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
    (b"", ""),
])
def test_provider_message_from_each_envelope(body: bytes, expected: str) -> None:
    assert provider_message(body) == expected


def test_map_state_unknown_words_never_terminated() -> None:
    table = lower_keys({"GONE": "terminated", "UP": "running"})
    assert map_state(table, "up") == "running"
    assert map_state(table, " GONE ") == "terminated"
    for word in ("TERMINATED_MAYBE", "", "gone!", None, 3):
        assert map_state(table, word) == "unknown"
    with pytest.raises(ValueError, match="unknown states"):
        lower_keys({"X": "dead"})
    assert set(table.values()) <= set(INSTANCE_STATES)


# -- requests, auth and errors ------------------------------------------------------------------------------

async def test_get_sends_bearer_header_and_decodes_json(http: CloudHTTP, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    data = await http.request("GET", "/pods/p1")
    assert data["id"] == "p1"
    [logged] = runpod_fake.requests("GET", "/pods/p1")
    assert logged.headers["authorization"] == "Bearer " + FAKE_KEY
    assert logged.headers["accept"] == "application/json"


async def test_404_is_cloud_not_found_with_provider_message(http: CloudHTTP) -> None:
    with pytest.raises(CloudNotFound) as info:
        await http.request("GET", "/pods/nope")
    assert info.value.status == 404
    assert str(info.value) == "runpod: GET /pods/nope failed: HTTP 404: Not Found: resource not found"


async def test_wrong_key_is_auth_error_not_retried(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    client = CloudHTTP("runpod", runpod_fake.url, ApiKey("rgt-fake-WRONG-000000", "test"),
                       HttpOptions(sleep=vtime.sleep))
    try:
        with pytest.raises(CloudAuthError) as info:
            await client.request("GET", "/pods")
    finally:
        await client.aclose()
    assert info.value.status == 401
    assert "Unauthorized: missing bearer token" in str(info.value) and "check the API key" in str(info.value)
    assert "rgt-fake-WRONG-000000" not in str(info.value)
    assert len(runpod_fake.requests("GET", "/pods")) == 1
    assert vtime.sleeps == []


async def test_429_retry_after_seconds_is_honoured(http: CloudHTTP, runpod_fake: FakeRunPod,
                                                   vtime: VirtualTime) -> None:
    runpod_fake.rate_limit("GET", "/pods", "7")
    assert await http.request("GET", "/pods") == {"pods": []}
    assert vtime.sleeps == [7.0]
    assert len(runpod_fake.requests("GET", "/pods")) == 2


async def test_429_retry_after_http_date_is_honoured(http: CloudHTTP, runpod_fake: FakeRunPod,
                                                     vtime: VirtualTime) -> None:
    runpod_fake.rate_limit("GET", "/pods", email.utils.formatdate(WALL + 42, usegmt=True))
    await http.request("GET", "/pods")
    assert vtime.sleeps == [pytest.approx(42.0)]


async def test_429_retry_after_is_capped(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    client = make_http(runpod_fake, vtime, retry=RetryPolicy(max_retry_after_s=60.0))
    runpod_fake.rate_limit("GET", "/pods", "86400")
    try:
        await client.request("GET", "/pods")
    finally:
        await client.aclose()
    assert vtime.sleeps == [60.0]


async def test_429_on_a_create_is_retried_because_it_was_not_processed(http: CloudHTTP, runpod_fake: FakeRunPod,
                                                                       vtime: VirtualTime) -> None:
    runpod_fake.rate_limit("POST", "/pods", "1")
    body = {"name": "x", "image": "img", "gpu": {"id": "NVIDIA A40"}}
    created = await http.request("POST", "/pods", json_body=body)
    assert created["id"] == "new1"
    assert vtime.sleeps == [1.0]
    assert len(runpod_fake.pods) == 1


async def test_5xx_retried_with_exponential_backoff_then_a_clear_error(http: CloudHTTP, runpod_fake: FakeRunPod,
                                                                       vtime: VirtualTime) -> None:
    runpod_fake.fail("GET", "/pods", 503, {"error": "maintenance window"}, times=99)
    with pytest.raises(CloudAPIError) as info:
        await http.request("GET", "/pods")
    assert vtime.sleeps == [0.5, 1.0, 2.0, 4.0]  # jitter pinned to its top
    assert len(runpod_fake.requests("GET", "/pods")) == 5
    assert str(info.value) == "runpod: GET /pods failed after 5 attempts: HTTP 503: maintenance window"
    assert info.value.status == 503 and info.value.attempts == 5


async def test_5xx_recovers_after_one_retry(http: CloudHTTP, runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    runpod_fake.fail("GET", "/pods", 502, {"error": "bad gateway"})
    assert await http.request("GET", "/pods") == {"pods": []}
    assert vtime.sleeps == [0.5]


async def test_5xx_on_a_create_is_not_retried(http: CloudHTTP, runpod_fake: FakeRunPod) -> None:
    runpod_fake.fail("POST", "/pods", 500, {"error": "internal"}, times=5)
    with pytest.raises(CloudAPIError, match="HTTP 500: internal"):
        await http.request("POST", "/pods", json_body={"name": "x", "image": "i", "gpu": {"id": "NVIDIA A40"}})
    assert len(runpod_fake.requests("POST", "/pods")) == 1


async def test_backoff_jitter_stays_within_half_to_full_ceiling() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0)
    assert policy.backoff(1, 0.0) == 0.5 and policy.backoff(1, 1.0) == 1.0
    assert policy.backoff(10, 1.0) == 5.0  # capped
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


async def test_read_timeout_retried_for_a_read(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    client = make_http(runpod_fake, vtime, timeout_s=0.5)
    runpod_fake.hang("GET", "/pods", 1.5, apply=True)
    try:
        assert await client.request("GET", "/pods") == {"pods": []}
    finally:
        await client.aclose()
    assert len(runpod_fake.requests("GET", "/pods")) == 2
    assert len(vtime.sleeps) == 1


async def test_read_timeout_not_retried_when_told(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    client = make_http(runpod_fake, vtime, timeout_s=0.5)
    runpod_fake.add_pod("p1")
    runpod_fake.hang("DELETE", "/pods/p1", 1.5, apply=True)
    try:
        with pytest.raises(CloudTimeout, match="no answer"):
            await client.request("DELETE", "/pods/p1", retry_timeouts=False)
    finally:
        await client.aclose()
    assert len(runpod_fake.requests("DELETE", "/pods/p1")) == 1


async def test_connection_refused_retried_then_error_without_key(vtime: VirtualTime) -> None:
    with FakeRunPod() as fake:
        url = fake.url
    client = CloudHTTP("runpod", url, ApiKey(FAKE_KEY, "test"),
                       HttpOptions(sleep=vtime.sleep, jitter=lambda: 0.0, retry=RetryPolicy(max_attempts=3)))
    try:
        with pytest.raises(CloudAPIError) as info:
            await client.request("GET", "/pods")
    finally:
        await client.aclose()
    assert info.value.status is None and info.value.attempts == 3
    assert vtime.sleeps == [0.25, 0.5]
    assert_no_key(*exception_chain(info.value), repr(info.value))
    assert info.value.__cause__ is None and info.value.__context__ is None


async def test_rate_limit_spaces_request_starts(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    client = make_http(runpod_fake, vtime, rate_limit_per_s=2.0)
    try:
        for _ in range(3):
            await client.request("GET", "/pods")
    finally:
        await client.aclose()
    assert vtime.sleeps == [0.5, 0.5]


async def test_non_json_success_body_is_an_error(http: CloudHTTP, runpod_fake: FakeRunPod) -> None:
    runpod_fake.faults.append(Fault("GET", "/pods", Reply(200, raw=b"<html>maintenance</html>")))
    with pytest.raises(CloudAPIError, match="not JSON"):
        await http.request("GET", "/pods")


async def test_query_values_never_shown_in_errors(http: CloudHTTP) -> None:
    with pytest.raises(CloudNotFound) as info:
        await http.request("GET", "/pods/zz", params={"includeMachine": "secret-cursor-value"})
    assert "secret-cursor-value" not in str(info.value)
    assert "/pods/zz?includeMachine=…" in str(info.value)


# -- the key never leaks ------------------------------------------------------------------------------------

async def test_key_echoed_in_an_error_body_is_redacted(http: CloudHTTP, runpod_fake: FakeRunPod) -> None:
    runpod_fake.fail("GET", "/pods", 400, {"error": f"key {FAKE_KEY} is not allowed; got Authorization: "
                                                    f"Bearer {FAKE_KEY}"})
    with pytest.raises(CloudAPIError) as info:
        await http.request("GET", "/pods")
    assert "<redacted>" in str(info.value)
    assert_no_key(str(info.value), repr(info.value), info.value.provider_message, *exception_chain(info.value))


async def test_no_key_in_any_log_record(runpod_fake: FakeRunPod, vtime: VirtualTime,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_http(runpod_fake, vtime)
    runpod_fake.rate_limit("GET", "/pods", "1")
    runpod_fake.fail("GET", "/pods/x", 500, {"error": f"echo {FAKE_KEY}"}, times=9)
    try:
        await client.request("GET", "/pods", params={"cursor": "opaque-cursor-123"})
        with pytest.raises(CloudAPIError):
            await client.request("GET", "/pods/x")
    finally:
        await client.aclose()
    messages = [record.getMessage() for record in caplog.records]
    assert any("HTTP Request" in m for m in messages), "httpx request lines were captured"
    assert any("retry" in m for m in messages)
    assert_no_key(*messages)
    assert not any("opaque-cursor-123" in m for m in messages)


def test_reprs_never_show_the_key(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    key = ApiKey(FAKE_KEY, "env RUNPOD_API_KEY")
    client = make_http(runpod_fake, vtime)
    assert_no_key(repr(key), str(key), f"{key}", repr(client), key.hint)
    assert key.hint == "…3a9c"
    assert key.reveal() == FAKE_KEY


# -- credentials --------------------------------------------------------------------------------------------

def test_env_var_wins_over_files(tmp_path: Path) -> None:
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text('apiKey = "from-file-key-123"\n')
    key = find_key("runpod", ["RUNPOD_API_KEY"], ["~/.runpod/config.toml#apiKey"],
                   environ={"RUNPOD_API_KEY": FAKE_KEY}, home=tmp_path)
    assert key.reveal() == FAKE_KEY and key.source == "env RUNPOD_API_KEY"


@pytest.mark.parametrize(("rel", "content", "entry"), [
    (".runpod/config.toml", 'apikey = "K-runpodctl-123456"\n', "~/.runpod/config.toml#apiKey"),
    (".runpod/config.toml", '[default]\napi_key = "K-runpodctl-123456"\n', "~/.runpod/config.toml#apiKey"),
    (".config/vastai/vast_api_key", "K-runpodctl-123456\n", "~/.config/vastai/vast_api_key"),
    (".vast_api_key", "  K-runpodctl-123456  \n", "~/.vast_api_key"),
    (".lambda_cloud/lambda_keys", "api_key = K-runpodctl-123456\n", "~/.lambda_cloud/lambda_keys#api_key"),
    (".paperspace/config.json", json.dumps({"apiKey": "K-runpodctl-123456"}), "~/.paperspace/config.json#apiKey"),
])
def test_key_from_each_provider_cli_file(tmp_path: Path, rel: str, content: str, entry: str) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    key = find_key("p", ["UNSET_VAR"], [entry], environ={}, home=tmp_path)
    assert key.reveal() == "K-runpodctl-123456"
    assert key.source == entry.split("#")[0]


def test_missing_key_is_one_line_naming_env_and_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rgt.toml").write_text(f'[instances.a]\nprovider = "runpod"\napi_key = "{FAKE_KEY}"\n')
    with pytest.raises(CredentialsMissing) as info:
        find_key("runpod", ["RUNPOD_API_KEY"], ["~/.runpod/config.toml#apiKey"], environ={}, home=tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert "RUNPOD_API_KEY" in text and "~/.runpod/config.toml" in text
    assert info.value.exit_code == 2


def test_malformed_credential_file_does_not_leak_its_content(tmp_path: Path) -> None:
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text(f"apiKey = {FAKE_KEY} unquoted\n")
    with pytest.raises(CredentialsMissing) as info:
        find_key("runpod", [], ["~/.runpod/config.toml#apiKey"], environ={}, home=tmp_path)
    assert_no_key(*exception_chain(info.value))


def test_malformed_key_is_refused() -> None:
    with pytest.raises(CredentialsMissing):
        ApiKey("abc\r\nX-Injected: 1", "env X")
    with pytest.raises(CredentialsMissing):
        ApiKey("", "env X")
