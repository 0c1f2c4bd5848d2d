"""Networks behind the great firewall (docs/remote-ops.md §12): `runs.<id>.network = "china"` reaches the job only
through its environment (a real sim job prints it), and phase-0 row 17 warns about a proxy without no_proxy
entries for loopback and the mirrors, from a real probe run."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.audits.env_audit import RunRequirements, proxy_row
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.env_audit import audit_run_environment
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.helpers import INSTANCE, RUN, wait_for_liveness, write_project

ENV_DUMP = ("env | grep -E '^(HF_ENDPOINT|PIP_INDEX_URL|HF_HOME|TORCH_HOME|PIP_CACHE_DIR|no_proxy|NO_PROXY)=' "
            "| LC_ALL=C sort > {out}/env.txt")
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "no_proxy",
              "NO_PROXY")


@pytest.fixture(autouse=True)
def no_inherited_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


async def job_env(root: Path, extra_run: str) -> list[str]:
    write_project(root, command=ENV_DUMP, roster=("seed0",), extra_run=extra_run)
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session, states=("finished", "dead"))
        dumped = root / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN / "seed0" / "env.txt"
        return dumped.read_text().split("\n")
    finally:
        await session.close_transports()
        session.close()


async def test_the_wrapper_exports_the_china_profile_and_no_proxy_only_when_a_proxy_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = tmp_path / "a" / ".rgt" / "sim" / INSTANCE
    plain = await job_env(tmp_path / "a", 'network = "china"')
    assert plain == ["HF_ENDPOINT=https://hf-mirror.com", f"HF_HOME={box}/workspace/job/.cache/huggingface",
                     f"PIP_CACHE_DIR={box}/workspace/job/.cache/pip",
                     "PIP_INDEX_URL=https://pypi.tuna.tsinghua.edu.cn/simple",
                     f"TORCH_HOME={box}/workspace/job/.cache/torch", ""]
    assert (box / "workspace" / "job" / ".cache" / "huggingface").is_dir()

    monkeypatch.setenv("http_proxy", "http://user:secret@proxy.example:3128")
    monkeypatch.setenv("no_proxy", "corp.example")
    proxied = await job_env(tmp_path / "b", 'network = "china"\ncache_dir = "/data/cache"')
    hosts = "corp.example,localhost,127.0.0.1,::1,hf-mirror.com,pypi.tuna.tsinghua.edu.cn"
    box_b = tmp_path / "b" / ".rgt" / "sim" / INSTANCE
    assert proxied == ["HF_ENDPOINT=https://hf-mirror.com", f"HF_HOME={box_b}/data/cache/huggingface",
                       f"NO_PROXY={hosts}", f"PIP_CACHE_DIR={box_b}/data/cache/pip",
                       "PIP_INDEX_URL=https://pypi.tuna.tsinghua.edu.cn/simple",
                       f"TORCH_HOME={box_b}/data/cache/torch", f"no_proxy={hosts}", ""]

    none = await job_env(tmp_path / "c", "")
    assert none == ["no_proxy=corp.example", ""]  # no network profile: the box's own value, nothing added
    wrapper = (tmp_path / "b" / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt" / RUN / "wrapper.sh")
    assert "secret" not in wrapper.read_text()  # the proxy's password never reaches a file rgt writes


async def env_rows(root: Path, extra_run: str) -> dict[str, tuple[str, str]]:
    write_project(root, roster=("seed0",), extra_run=extra_run)
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
        rows = await audit_run_environment(session, RUN)
        return {row.check: (row.status, row.detail) for row in rows}
    finally:
        await session.close_transports()
        session.close()


async def test_row_17_warns_about_a_proxy_without_no_proxy_and_passes_when_covered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await env_rows(tmp_path / "a", 'network = "china"'))["proxy"] == ("pass", "no proxy set")
    monkeypatch.setenv("http_proxy", "http://user:secret@proxy.example:3128")
    rows = await env_rows(tmp_path / "b", 'network = "china"')
    assert rows["proxy"] == ("warn", "http_proxy set, but no_proxy lacks localhost, 127.0.0.1, hf-mirror.com, "
                             "pypi.tuna.tsinghua.edu.cn: loopback and mirror traffic goes through the proxy (the run's "
                             "network profile adds them for the job itself, docs/remote-ops.md §12)")
    assert "secret" not in repr(rows)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,.hf-mirror.com, pypi.tuna.tsinghua.edu.cn")
    rows = await env_rows(tmp_path / "c", 'network = "china"')
    assert rows["proxy"] == ("pass", "http_proxy set; no_proxy covers localhost, 127.0.0.1, hf-mirror.com, "
                             "pypi.tuna.tsinghua.edu.cn")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert (await env_rows(tmp_path / "d", ""))["proxy"][0] == "pass"  # no network profile: loopback suffices


def test_row_17_matching_rules() -> None:
    req = RunRequirements(no_proxy_hosts=("localhost", "127.0.0.1", "hf-mirror.com"))
    def status(no_proxy: str) -> str:
        return proxy_row({"proxy": {"set": ["HTTPS_PROXY"], "no_proxy": no_proxy, "NO_PROXY": ""}}, req).status
    assert [status(v) for v in ("*", "LOCALHOST 127.0.0.1 hf-mirror.com", "localhost,127.0.0.1,mirror.com",
                                "localhost,127.0.0.1,cdn.hf-mirror.com", "localhost,127.0.0.1,hf-mirror.com")] == [
        "pass", "pass", "warn", "warn", "pass"]
    assert proxy_row({}, req).status == "skipped"
