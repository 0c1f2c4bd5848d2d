"""Redaction: every verb, run with a recognisable fake API key, leaves the key in no output (DESIGN.md §3.2, §6).

The project has a sim box and two cloud instances, RunPod and Lambda, served by the local fake APIs of
fake_clouds.py and reached over SSH at a real loopback sshd (the address RunPod's API reports, and Lambda's
`host`). The key is set once through the providers' env vars and once through the provider CLIs' own
credential files under a temp HOME. `rgt` runs in-process through `cli.main`, along the whole arc (trust,
up, push, run, watch, pull, verify, tick, events, down, the reports) and the failure paths: a refused
teardown, a bad fingerprint, `--debug` tracebacks, provider error bodies that echo the key back (401, 500,
503, and one long enough that the key straddles the error-message cut), and an API that refuses
connections. Afterwards the key, its first and last 16 characters and its base64 forms are searched for in
stdout, stderr, every log record (DEBUG and up), every exception text, every file under the test's temp
folder (reports, `.rgt/` with state.db and known_hosts, sim disks, the boxes) and every row of every table
of every state database. The fakes' request logs prove the key was really sent, so a run that never used
it cannot pass.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_clouds import FakeLambda, FakeRunPod
from sshd_fixtures import Sshd, free_port

from helpers import copy_command, toml_string
from remote_gpu_trainer.cli import VERBS, main

pytestmark = pytest.mark.sshd

KEY = "rgt-fake-KEY-7f3a9c-5be21d40c8a6e913"
KEY_ENV = {"runpod": "RUNPOD_API_KEY", "lambda": "LAMBDA_API_KEY"}
OTHER_KEY_ENV = ("VAST_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN", "RUNPOD_API_URL", "VAST_URL",
                 "SSH_AUTH_SOCK")
NEEDLES = {
    "key": KEY,
    "first 16 chars": KEY[:16],
    "last 16 chars": KEY[-16:],
    "basic token": base64.b64encode(f"{KEY}:".encode()).decode(),
    "base64 key": base64.b64encode(KEY.encode()).decode().rstrip("="),
}
MESSAGE_CUT = 300  # cloud/http.py MAX_MESSAGE_CHARS: a provider message is cut there
BOGUS_FINGERPRINT = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
CLOUD_RUNS = ("c1", "l1")
ALL_RUNS = ("r1", *CLOUD_RUNS)


# -- where the key could show -------------------------------------------------------------------------------

def find_needles(where: str, text: str) -> list[str]:
    """One line per needle found in `text`: where, which form, and the text around it."""
    hits = []
    for name, needle in NEEDLES.items():
        at = text.find(needle)
        if at >= 0:
            hits.append(f"{where}: {name} at {at}: …{text[max(0, at - 120):at + len(needle) + 40]!r}…")
    return hits


def cell_text(value: object) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def database_rows(path: Path) -> Iterator[tuple[str, str]]:
    """(table, every column as text) for every row of every table."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # noqa: S608 - names from sqlite_master
                yield table, " | ".join(cell_text(cell) for cell in row)
    finally:
        conn.close()


def exception_text(exc: BaseException) -> str:
    """The traceback as --debug prints it, plus str, repr and attributes of each exception in the chain."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        parts += [str(current), repr(current), repr(current.args), repr(getattr(current, "__dict__", {}))]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@dataclass
class Outcome:
    argv: tuple[str, ...]
    rc: int | None
    out: str
    err: str
    exc: str = ""

    @property
    def text(self) -> str:
        return "\n".join((self.out, self.err, self.exc))


@dataclass
class Cli:
    """`rgt ARGV` in-process; keeps what each call printed and, with --debug, the exception it raised."""

    capsys: pytest.CaptureFixture[str]
    outcomes: list[Outcome] = field(default_factory=list)

    def __call__(self, *argv: str) -> Outcome:
        rc: int | None = None
        raised = ""
        try:
            rc = main(list(argv))
        except Exception as exc:  # noqa: BLE001 - only --debug lets one out; anything else fails below
            if "--debug" not in argv:
                raise
            raised = exception_text(exc)
        captured = self.capsys.readouterr()
        outcome = Outcome(tuple(argv), rc, captured.out, captured.err, raised)
        self.outcomes.append(outcome)
        return outcome

    def verbs(self) -> set[str]:
        return {o.argv[0] for o in self.outcomes if o.argv and o.argv[0] in VERBS}


# -- the project ----------------------------------------------------------------------------------------------

def run_table(run_id: str, instance: str, box: Path | None) -> str:
    workdir = str(box / "job") if box else "/workspace/job"
    remote_root = str(box / "rgt" / run_id) if box else f"/workspace/rgt/{run_id}"
    return f"""
[runs.{run_id}]
instance = "{instance}"
workdir = {toml_string(workdir)}
command = {toml_string(copy_command())}
log = "train.log"
remote_root = {toml_string(remote_root)}
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
metric = {{ name = "val_loss", direction = "min" }}
python = {toml_string(sys.executable)}
"""


def write_cloud_project(root: Path, boxes: Path, runpod_api: str, lambda_api: str, ssh_port: int) -> Path:
    """A sim box, a RunPod pod (SSH at the address its API reports) and a Lambda instance (SSH at `host`)."""
    root.mkdir(parents=True, exist_ok=True)
    text = f"""\
[project]
name = "redaction"

[instances.box]
provider = "sim"

[instances.pod]
provider = "runpod"
id = "p1"
api_base = "{runpod_api}"

[instances.lam]
provider = "lambda"
id = "l1"
api_base = "{lambda_api}"
host = "root@127.0.0.1:{ssh_port}"
"""
    text += run_table("r1", "box", None) + run_table("c1", "pod", boxes / "pod") + run_table("l1", "lam", boxes / "lam")
    path = root / "rgt.toml"
    path.write_text(text, encoding="utf-8")
    return path


def echo_body(fake: FakeRunPod | FakeLambda, status: int, *, straddle: bool = False) -> Any:
    """The provider's error envelope with a message that quotes the key, its header and its Basic token back;
    `straddle` puts the key across the message cut, so only its first 20 characters survive the cut."""
    if straddle:
        message = "x" * (MESSAGE_CUT - 20) + KEY + " was rejected"
    else:
        message = (f"key {KEY} rejected (Authorization: Bearer {KEY}; Basic {NEEDLES['basic token']}); "
                   f"raw={KEY}")
    return fake.error_body(status, message)


@pytest.fixture
def runpod_fake() -> Iterator[FakeRunPod]:
    with FakeRunPod(KEY) as fake:
        yield fake


@pytest.fixture
def lambda_fake() -> Iterator[FakeLambda]:
    with FakeLambda(KEY) as fake:
        yield fake


def credential_files(home: Path) -> dict[str, Path]:
    return {"runpod": home / ".runpod" / "config.toml", "lambda": home / ".lambda_cloud" / "lambda_keys"}


@pytest.fixture(params=["env", "cli-file"])
def key_home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sshd: Sshd) -> Path:
    """A temp HOME holding the sshd's client key as ~/.ssh/id_ed25519; the API key in the env vars, or only
    in the provider CLIs' credential files (the env vars unset)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    identity = home / ".ssh" / "id_ed25519"
    shutil.copyfile(sshd.client_key, identity)
    identity.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764417600")
    for name in OTHER_KEY_ENV:
        monkeypatch.delenv(name, raising=False)
    if request.param == "env":
        for name in KEY_ENV.values():
            monkeypatch.setenv(name, KEY)
    else:
        for name in KEY_ENV.values():
            monkeypatch.delenv(name, raising=False)
        files = credential_files(home)
        files["runpod"].parent.mkdir()
        files["runpod"].write_text(f'apiKey = "{KEY}"\n', encoding="utf-8")
        files["lambda"].parent.mkdir()
        files["lambda"].write_text(f"api_key = {KEY}\n", encoding="utf-8")
    return home


# -- the test -------------------------------------------------------------------------------------------------

def test_no_verb_leaves_the_api_key_anywhere(key_home: Path, tmp_path: Path, sshd: Sshd, runpod_fake: FakeRunPod,
                                             lambda_fake: FakeLambda, capsys: pytest.CaptureFixture[str],
                                             caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    root = tmp_path / "proj"
    config = write_cloud_project(root, tmp_path / "boxes", runpod_fake.url, lambda_fake.url, sshd.port)
    monkeypatch.chdir(root)
    runpod_fake.add_pod("p1", publicIp=sshd.host, portMappings={"22": sshd.port})
    lambda_fake.add_instance("l1", "active", ip=sshd.host)
    fingerprint = sshd.host_public_key().get_fingerprint("sha256")
    proj = str(root)
    rgt = Cli(capsys)

    assert rgt("info", proj).rc == 0
    for provider in KEY_ENV:
        rgt("init", str(tmp_path / f"init-{provider}"), "--provider", provider)
    rgt("init", str(tmp_path / "init-runpod"), "--provider", "runpod")  # refused: never overwrites

    # -- the provider answers with the key in its error body ---------------------------------------------------
    runpod_fake.fail("GET", "/pods/p1", 401, echo_body(runpod_fake, 401), times=1000)
    lambda_fake.fail("GET", "/instances/l1", 503, echo_body(lambda_fake, 503), headers={"Retry-After": "0"},
                     times=1000)
    for fmt in ("text", "markdown", "json"):
        assert rgt("--report", "--format", fmt, proj).rc == 0
    echoed = rgt("--report", "--format", "json", proj)
    notes = {i["name"]: i["note"] for i in json.loads(echoed.out)["instances"]}
    assert "HTTP 401" in notes["pod"] and "HTTP 503" in notes["lam"]  # the echoing bodies reached the report
    for run_id in CLOUD_RUNS:
        rgt("up", run_id, proj)
        rgt("up", run_id, proj, "--debug")
        rgt("watch", run_id, proj, "--once")
    rgt("trust", "pod", proj, "--fingerprint", fingerprint, "--debug")  # the API is down: nothing to trust
    rgt("down", "c1", proj, "--confirm", "p1", "--stop", "--debug")
    runpod_fake.faults.clear()
    lambda_fake.faults.clear()
    runpod_fake.fail("GET", "/pods/p1", 500, echo_body(runpod_fake, 500, straddle=True), times=1)
    retried = rgt("--report", "--format", "json", proj)  # one logged retry, then the real answer
    assert {i["name"]: i["state"] for i in json.loads(retried.out)["instances"]}["pod"] == "running"
    assert any("retry 1" in r.getMessage() for r in caplog.records)
    runpod_fake.fail("GET", "/pods/p1", 401, echo_body(runpod_fake, 401, straddle=True), times=2)
    rgt("--report", "--format", "text", proj)
    rgt("up", "c1", proj, "--debug")

    # -- the whole arc on all three instances ------------------------------------------------------------------
    rgt("trust", "lam", proj, "--fingerprint", BOGUS_FINGERPRINT)  # refused: not the presented key
    rgt("trust", "lam", proj, "--fingerprint", BOGUS_FINGERPRINT, "--debug")
    assert rgt("trust", "pod", proj, "--fingerprint", fingerprint).rc == 0
    rgt("trust", "lam", proj, "--fingerprint", fingerprint)  # same host:port, already trusted: nothing to do
    for run_id in ALL_RUNS:
        rgt("up", run_id, proj)
        rgt("push", run_id, proj)
        rgt("run", run_id, proj, "--ack", "redaction test on a CPU box")
    for run_id in ALL_RUNS:
        rgt("watch", run_id, proj, "--interval", "0.2")
        rgt("watch", run_id, proj, "--once")
        rgt("tick", run_id, "T01", proj, "--note", "checked by hand")
        rgt("pull", run_id, proj)
        rgt("verify", run_id, proj)
    rgt("tick", "c1", "NO-SUCH-ITEM", proj)
    rgt("down", "c1", proj, "--confirm", "WRONGID")
    rgt("down", "c1", proj, "--confirm", "WRONGID", "--debug")
    runpod_fake.fail("POST", "/pods/p1/stop", 401, echo_body(runpod_fake, 401), times=2)
    rgt("down", "c1", proj, "--confirm", "p1", "--stop", "--debug")
    rgt("down", "c1", proj, "--confirm", "p1", "--stop")
    rgt("down", "c1", proj, "--confirm", "p1", "--stop")
    rgt("down", "l1", proj, "--confirm", "l1", "--stop")  # Lambda has no stop
    rgt("down", "l1", proj, "--confirm", "l1")
    rgt("down", "r1", proj, "--confirm", "sim-box")
    assert rgt("events", proj).rc == 0
    assert rgt("events", proj, "--run", "c1").rc == 0
    for fmt in ("text", "markdown", "json"):
        assert rgt("--report", "--format", fmt, proj).rc == 0
        assert rgt("--report", "--format", fmt, "--output", str(root / f"report.{fmt}"), proj).rc == 0
    rgt("--report", "--strict", proj)

    # -- no API at all ---------------------------------------------------------------------------------------
    config.write_text(config.read_text().replace(runpod_fake.url, f"http://127.0.0.1:{free_port()}/v1"))
    unreachable = rgt("--report", "--format", "json", proj)
    pod = next(i for i in json.loads(unreachable.out)["instances"] if i["name"] == "pod")
    assert pod["state"] == "unknown" and "no answer" in pod["note"]
    rgt("down", "c1", proj, "--confirm", "p1", "--debug")

    with_demo = KEY_ENV["runpod"] in os.environ  # once is enough: the demo's job inherits the env key
    if with_demo:
        rgt("demo", str(tmp_path / "demo"), "--no-tui", "--quick")
        rgt("watch", "demo", str(tmp_path / "demo"), "--interval", "0.5")

    # -- the key really went out, and only in the Authorization header -----------------------------------------
    assert rgt.verbs() == set(VERBS) - (set() if with_demo else {"demo"})
    for fake in (runpod_fake, lambda_fake):
        sent = fake.requests()
        assert sent and {r.headers.get("authorization") for r in sent} == {f"Bearer {KEY}"}
    assert len(runpod_fake.requests("POST", "/pods/p1/stop")) == 3  # two refused with the key echoed, one done
    assert runpod_fake.pods["p1"]["desiredStatus"] == "EXITED"
    assert lambda_fake.requests("POST", "/instance-operations/terminate")
    assert "l1" in lambda_fake.deleted

    # -- and it is nowhere -------------------------------------------------------------------------------------
    leaks: list[str] = []
    for outcome in rgt.outcomes:
        leaks += find_needles(f"rgt {' '.join(outcome.argv)} (rc {outcome.rc})", outcome.text)
    for record in caplog.records:
        leaks += find_needles(f"log {record.name}:{record.levelname}",
                              f"{record.getMessage()}\n{record.args!r}\n{record.exc_text or ''}")
    leaks += find_needles("log text", caplog.text)
    cred_files = set(credential_files(key_home).values())
    scanned = databases = rows = 0
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()):
        leaks += find_needles(f"file name {path}", str(path))
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_bytes().decode("latin-1")
        if path in cred_files:
            assert find_needles(str(path), text), "the search must find the key where it is"
            continue
        scanned += 1
        leaks += find_needles(f"file {path.relative_to(tmp_path)}", text)
        if text.startswith("SQLite format 3\0"):
            databases += 1
            for table, row in database_rows(path):
                rows += 1
                leaks += find_needles(f"{path.relative_to(tmp_path)} table {table}", row)
    assert scanned > 20 and databases >= 1 and rows > 20
    assert (root / ".rgt" / "known_hosts").is_file() and (root / "report.json").is_file()
    assert not leaks, "the API key leaked:\n" + "\n".join(leaks)
