"""Redaction: every verb, run with a recognisable fake API key, leaves the key in no output
(docs/architecture.md §3.2, §6).

The project has a sim box and two cloud instances, RunPod and Lambda, served by the local fake APIs of
fake_clouds.py and reached over SSH at a real loopback sshd (RunPod at the address its API reports, Lambda at
its `host`). The key is set once through the providers' env vars and once only in the provider CLIs' own
credential files under a temp HOME. `rgt` runs in-process through `cli.main` along the whole arc (trust, up,
push, run, watch, pull, verify, tick, events, down, status, demo, the reports) and its failure paths: refused
teardowns, bad fingerprints, `--debug` tracebacks, provider error bodies that echo the key and its header
back (401, 500, 503), an API that refuses connections, and an echoed key that straddles the length at which
provider messages are cut.

Afterwards the key, its first and last 16 characters and its base64 forms are searched for in stdout,
stderr, every log record (DEBUG and up), every exception text, every file under the test's temp folder
(reports, `.rgt/` with state.db and known_hosts, sim disks, the boxes' folders) and every column of every
row of every table of every state database. The fakes' request logs prove that the key was really sent, so
a run that never used it cannot pass; and the search is shown to find the key in the credential files.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import sqlite3
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.cli.parser import VERBS
from support.fake_clouds import FakeLambda, FakeRunPod
from support.helpers import copy_command, toml_string
from support.mcp_agent import agent
from support.sshd_fixtures import Sshd, free_port

pytestmark = pytest.mark.sshd

KEY = "rgt-fake-KEY-7f3a9c-5be21d40c8a6e913"
KEY_ENV = {"runpod": "RUNPOD_API_KEY", "lambda": "LAMBDA_API_KEY"}
UNSET_ENV = ("VAST_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN", "RUNPOD_API_URL", "VAST_URL", "SSH_AUTH_SOCK")
NEEDLES = {
    "key": KEY,
    "first 16 chars": KEY[:16],
    "last 16 chars": KEY[-16:],
    "basic token": base64.b64encode(f"{KEY}:".encode()).decode(),
    "base64 key": base64.b64encode(KEY.encode()).decode().rstrip("="),
}
MESSAGE_CUT = 300  # cloud/http.py MAX_MESSAGE_CHARS: a provider's error message is cut to this length
STRADDLE_PAD = MESSAGE_CUT - 20  # the echoed key then starts 20 characters before the cut
BOGUS_FINGERPRINT = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
ACK = "redaction test on a CPU box"


# -- where the key could show -------------------------------------------------------------------------------

def find_needles(where: str, text: str) -> list[str]:
    """One line per form of the key found in `text`: where, which form, and the text around it."""
    hits = []
    for name, needle in NEEDLES.items():
        at = text.find(needle)
        if at >= 0:
            hits.append(f"{where}: {name} at {at}: …{text[max(0, at - 100):at + len(needle) + 40]!r}…")
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
    """The traceback as --debug prints it, plus str, repr, args and attributes of each exception in the chain."""
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
    rc: int | None  # None: it raised (only ever with --debug)
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
        except Exception as exc:  # noqa: BLE001 - only --debug lets one out; without it the test fails here
            if "--debug" not in argv:
                raise
            raised = exception_text(exc)
        captured = self.capsys.readouterr()
        outcome = Outcome(tuple(argv), rc, captured.out, captured.err, raised)
        self.outcomes.append(outcome)
        return outcome

    def verbs(self) -> set[str]:
        return {o.argv[0] for o in self.outcomes if o.argv and o.argv[0] in VERBS}


async def agent_arc(proj: Path, stderr: Path) -> list[str]:
    """An agent's look at the project through `rgt mcp` (the real server and client): every result it saw."""
    async with agent(proj, stderr) as bot:
        for tool, arguments in (("rgt_status", {}), ("rgt_report", {}), ("rgt_events", {}),
                                ("rgt_watch", {"run": "c1"}), ("rgt_findings", {}),
                                ("rgt_request_stop", {"instance": "pod", "why": "pause the pod"}),
                                ("rgt_request_rent", {"run": "c1", "why": "train"}), ("rgt_requests", {})):
            await bot.call(tool, arguments)
        return list(bot.seen)


def leaks_everywhere(rgt: Cli, caplog: pytest.LogCaptureFixture, tmp_path: Path, home: Path) -> tuple[list[str], int]:
    """Every place a form of the key shows, and how many database rows were read."""
    leaks: list[str] = []
    for outcome in rgt.outcomes:
        leaks += find_needles(f"rgt {' '.join(outcome.argv)} (rc {outcome.rc})", outcome.text)
    for record in caplog.records:
        leaks += find_needles(f"log {record.name}:{record.levelname}",
                              f"{record.getMessage()}\n{record.args!r}\n{record.exc_text or ''}")
    leaks += find_needles("formatted log", caplog.text)
    credentials = set(credential_files(home).values())
    files = rows = 0
    for path in sorted(tmp_path.rglob("*")):
        leaks += find_needles(f"file name {path}", str(path))
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_bytes().decode("latin-1")
        if path in credentials:
            assert find_needles(str(path), text), "the search must find the key where it is"
            continue
        files += 1
        where = str(path.relative_to(tmp_path))
        leaks += find_needles(f"file {where}", text)
        if text.startswith("SQLite format 3\0"):
            for table, row in database_rows(path):
                rows += 1
                leaks += find_needles(f"{where} table {table}", row)
    assert files > 20, "the project, its state and the boxes were searched"
    return list(dict.fromkeys(leaks)), rows


# -- the project ----------------------------------------------------------------------------------------------

def run_table(run_id: str, instance: str, box: Path | None) -> str:
    """A run whose job copies the committed checkpoints: on the sim disk, or in `box` (the sshd's machine)."""
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
    """Instances box (sim), pod (RunPod, SSH where its API says) and lam (Lambda, SSH at `host`); a run on each."""
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
    """The provider's error envelope quoting the key and the header it came in; with `straddle`, only the key,
    placed across the message cut so that the cut alone leaves its first 20 characters."""
    if straddle:  # RunPod's message is "<title>: <detail>": the title's length moves the cut into the detail
        before = len(HTTPStatus(status).phrase) + 2 if isinstance(fake, FakeRunPod) else 0
        message = "x" * (STRADDLE_PAD - before) + KEY + " was rejected"
    else:
        message = f"key {KEY} rejected (Authorization: Bearer {KEY}); raw={KEY}"
    body = fake.error_body(status, message)
    if isinstance(fake, FakeLambda):  # its recorded envelope, with the echoing message in its `message`
        body["error"]["message"] = message
    return body


def credential_files(home: Path) -> dict[str, Path]:
    """Where runpodctl and SkyPilot's Lambda client keep the key (the profiles' `auth_files`)."""
    return {"runpod": home / ".runpod" / "config.toml", "lambda": home / ".lambda_cloud" / "lambda_keys"}


@pytest.fixture
def runpod_fake() -> Iterator[FakeRunPod]:
    with FakeRunPod(KEY) as fake:
        yield fake


@pytest.fixture
def lambda_fake() -> Iterator[FakeLambda]:
    with FakeLambda(KEY) as fake:
        yield fake


@pytest.fixture
def key_home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sshd: Sshd) -> Path:
    """A temp HOME with the sshd's client key as ~/.ssh/id_ed25519; the API key in the env vars ("env") or
    only in the provider CLIs' credential files, the env vars unset ("cli-file")."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    identity = home / ".ssh" / "id_ed25519"
    shutil.copyfile(sshd.client_key, identity)
    identity.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764417600")
    for name in UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in KEY_ENV.values():
        monkeypatch.delenv(name, raising=False)
    if request.param == "env":
        for name in KEY_ENV.values():
            monkeypatch.setenv(name, KEY)
    else:
        files = credential_files(home)
        files["runpod"].parent.mkdir()
        files["runpod"].write_text(f'apiKey = "{KEY}"\n', encoding="utf-8")
        files["lambda"].parent.mkdir()
        files["lambda"].write_text(f"api_key = {KEY}\n", encoding="utf-8")
    return home


@dataclass
class World:
    rgt: Cli
    root: Path
    config: Path
    fingerprint: str

    @property
    def proj(self) -> str:
        return str(self.root)


@pytest.fixture
def world(key_home: Path, tmp_path: Path, sshd: Sshd, runpod_fake: FakeRunPod, lambda_fake: FakeLambda,
          capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
          monkeypatch: pytest.MonkeyPatch) -> World:
    caplog.set_level(logging.DEBUG)
    root = tmp_path / "proj"
    config = write_cloud_project(root, tmp_path / "boxes", runpod_fake.url, lambda_fake.url, sshd.port)
    monkeypatch.chdir(root)
    runpod_fake.add_pod("p1", host=sshd.host, port=sshd.port)
    lambda_fake.add_instance("l1", "active", ip=sshd.host)
    return World(Cli(capsys), root, config, sshd.host_public_key().get_fingerprint("sha256"))


def wait_finished(rgt: Cli, run_id: str, project: str, timeout_s: float = 60.0) -> None:
    """`watch --once` until the run reads finished (a plain `watch` would wait forever on an unknown state)."""
    deadline = time.monotonic() + timeout_s
    while "finished" not in rgt("watch", run_id, project, "--once").out:
        assert time.monotonic() < deadline, f"run {run_id} did not finish in {timeout_s:g} s"
        time.sleep(0.2)


def assert_key_sent(*fakes: FakeRunPod | FakeLambda) -> None:
    """The key went out, as the documented header and nothing else, on every request the fakes saw."""
    for fake in fakes:
        sent = fake.requests()
        assert sent, f"{fake.provider}: no request reached the fake"
        assert {r.headers.get("authorization") for r in sent} == {f"Bearer {KEY}"}


# -- the tests ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key_home", ["env", "cli-file"], indirect=True)
def test_no_verb_leaves_the_api_key_anywhere(world: World, key_home: Path, tmp_path: Path,
                                             runpod_fake: FakeRunPod, lambda_fake: FakeLambda,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Every verb, the failure paths and provider bodies echoing the whole key: it shows nowhere."""
    rgt, proj = world.rgt, world.proj
    assert rgt("info", proj).rc == 0
    assert rgt("help").rc == 0 and rgt("help", "down").rc == 0
    rgt("completion", "bash")
    rgt("info", proj, "--format", "json")
    for provider in KEY_ENV:
        rgt("init", str(tmp_path / f"init-{provider}"), "--provider", provider)
    rgt("init", str(tmp_path / "init-runpod"), "--provider", "runpod")  # refused: never overwrites

    # -- the providers answer with the key in their error bodies -----------------------------------------------
    runpod_fake.fail("GET", "/pods/p1", 503, echo_body(runpod_fake, 503), headers={"Retry-After": "0"},
                     times=1000)
    lambda_fake.fail("GET", "/instances/l1", 401, echo_body(lambda_fake, 401), times=1000)
    for fmt in ("text", "markdown"):
        assert rgt("--report", "--format", fmt, proj).rc == 0
    echoed = rgt("--report", "--format", "json", proj)
    notes = {i["name"]: i["note"] for i in json.loads(echoed.out)["instances"]}
    assert "HTTP 503" in notes["pod"] and "HTTP 401" in notes["lam"]  # the echoing bodies reached the report
    assert "<redacted>" in notes["pod"] + notes["lam"]
    runpod_fake.fail("GET", "/pods", 401, echo_body(runpod_fake, 401), times=2)  # the account's list echoes it
    rgt("status", proj, "--timeout", "5")
    rgt("status", "--all", "--timeout", "5", "--format", "json")
    for run_id in ("c1", "l1"):
        rgt("up", run_id, proj)
        rgt("up", run_id, proj, "--debug")
        rgt("watch", run_id, proj, "--once")
    rgt("trust", "pod", proj, "--fingerprint", world.fingerprint, "--debug")  # no answer: nothing to trust
    rgt("down", "c1", proj, "--confirm", "p1", "--stop", "--debug")
    runpod_fake.faults.clear()
    lambda_fake.faults.clear()
    runpod_fake.fail("GET", "/pods/p1", 500, echo_body(runpod_fake, 500), times=1)
    retried = rgt("--report", "--format", "json", proj)  # one logged retry, then the real answer
    assert {i["name"]: i["state"] for i in json.loads(retried.out)["instances"]}["pod"] == "running"
    assert any("HTTP 500" in r.getMessage() and "retry 1" in r.getMessage() for r in caplog.records)

    # -- the whole arc, on both clouds (and the sim box while the key is in the env) ----------------------------
    rgt("trust", "lam", proj, "--fingerprint", BOGUS_FINGERPRINT)  # refused: not the key the host presents
    rgt("trust", "lam", proj, "--fingerprint", BOGUS_FINGERPRINT, "--debug")
    assert rgt("trust", "pod", proj, "--fingerprint", world.fingerprint).rc == 0
    rgt("trust", "lam", proj, "--fingerprint", world.fingerprint)  # the same host:port: already trusted
    with_env_key = KEY_ENV["runpod"] in os.environ  # then the sim box's jobs and the demo's inherit the key
    runs = ("r1", "c1", "l1") if with_env_key else ("c1", "l1")
    for run_id in runs:
        rgt("up", run_id, proj)
        rgt("push", run_id, proj)
        rgt("run", run_id, proj, "--ack", ACK)
    for run_id in runs:
        if run_id != "c1":  # c1's verbs may fail (the fake pod has no SSH of its own): their output counts
            wait_finished(rgt, run_id, proj)
    for run_id in runs:
        rgt("watch", run_id, proj, "--once")
        rgt("tick", run_id, "T01", proj, "--note", "checked by hand")
        rgt("pull", run_id, proj)
        rgt("verify", run_id, proj)
        rgt("verify", run_id, proj, "--format", "json")
    rgt("tick", "c1", "NO-SUCH-ITEM", proj)
    rgt("audit", proj)
    rgt("audit", "c1", proj, "--format", "json")
    rgt("accept", "c1", proj, "--here")  # the pulled copy accepted here (or refused): its output counts
    rgt("probe", "c1", "V20", proj)  # no [verify.probe] hook: refused, and the refusal leaks nothing
    rgt("finding", "F-000001", proj)
    rgt("capsule")
    rgt("splits", "build", "main", proj, "--split", "test=no-such-folder")  # refused: nothing to list
    rgt("build", proj)  # nothing to build here: refused, and the refusal leaks nothing
    rgt("build", "evidence", proj, "--format", "json")
    rgt("reconcile", proj)  # no [deliver] docs: refused
    rgt("completeness", proj)  # no [grid]: refused
    rgt("adopt", "pod", proj)  # the pod's ledger read over SSH (or refused): its output counts
    rgt("adopt", "lam", proj, "--format", "json")
    rgt("down", "c1", proj, "--confirm", "WRONGID")
    rgt("down", "c1", proj, "--confirm", "WRONGID", "--debug")
    rgt("down", "c1", proj, "--confirm", "p1", "--stop")
    rgt("down", "l1", proj, "--confirm", "l1", "--stop")  # Lambda has no stop
    lambda_fake.fail("POST", "/instance-operations/terminate", 401, echo_body(lambda_fake, 401), times=2)
    rgt("down", "l1", proj, "--confirm", "l1", "--debug")
    rgt("down", "l1", proj, "--confirm", "l1")
    rgt("down", "l1", proj, "--confirm", "l1")  # now the provider takes it
    if with_env_key:
        rgt("down", "r1", proj, "--confirm", "sim-box")
    assert rgt("events", proj).rc == 0
    assert rgt("events", proj, "--run", "l1").rc == 0
    rgt("events", proj, "--format", "json")
    for fmt in ("text", "markdown", "json"):
        assert rgt("--report", "--format", fmt, proj).rc == 0
        assert rgt("--report", "--format", fmt, "--output", str(world.root / f"report.{fmt}"), proj).rc == 0
    rgt("--report", "--strict", proj)

    # -- no API at all ---------------------------------------------------------------------------------------
    world.config.write_text(world.config.read_text().replace(runpod_fake.url, f"http://127.0.0.1:{free_port()}/v1"))
    unreachable = rgt("--report", "--format", "json", proj)
    pod = next(i for i in json.loads(unreachable.out)["instances"] if i["name"] == "pod")
    assert pod["state"] == "unknown" and "no answer" in pod["note"]

    if with_env_key:
        rgt("down", "c1", proj, "--confirm", "p1", "--debug")
        rgt("demo", str(tmp_path / "demo"), "--no-tui", "--quick")
        wait_finished(rgt, "demo", str(tmp_path / "demo"), timeout_s=120)

    # -- the agent's face and the inbox, with the key where the verbs had it --------------------------------------
    stderr = tmp_path / "mcp-stderr.txt"
    seen = asyncio.run(agent_arc(Path(proj), stderr))
    rgt.outcomes.append(Outcome(("mcp", proj), 0, "\n".join(seen), stderr.read_text(encoding="utf-8")))
    assert rgt("approve", "--list", proj).rc == 0
    rgt("approve", "--list", proj, "--format", "json")
    assert rgt("approve", "Q-000001", proj).rc == 2  # no terminal here: refused
    assert rgt("reject", "Q-000001", proj, "--note", "no").rc == 2
    assert rgt("skill").rc == 0
    assert rgt("recover", "c1", proj).rc == 0
    assert rgt("recover", "c1", proj, "--format", "json").rc == 0
    assert rgt("recover", "c1", proj, "--approve").rc == 2  # no terminal here: refused

    # -- the key really went out, and the calls that echoed it really happened ---------------------------------
    assert rgt.verbs() == set(VERBS) - (set() if with_env_key else {"demo"})
    assert_key_sent(runpod_fake, lambda_fake)
    assert len(lambda_fake.requests("POST", "/instance-operations/terminate")) == 3  # 2 echo the key, 1 takes
    assert "l1" in lambda_fake.deleted

    # -- and it is nowhere -------------------------------------------------------------------------------------
    leaks, rows = leaks_everywhere(rgt, caplog, tmp_path, key_home)
    assert rows > 20 and (world.root / ".rgt" / "known_hosts").is_file()
    assert not leaks, "the API key leaked:\n" + "\n".join(leaks)


@pytest.mark.parametrize("key_home", ["env"], indirect=True)
def test_a_key_cut_at_the_message_limit_is_still_redacted(world: World, key_home: Path, tmp_path: Path,
                                                          runpod_fake: FakeRunPod, lambda_fake: FakeLambda,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A provider message longer than the cut, quoting the key just where the cut falls: what survives the cut
    is a piece of the key, which must not reach a log, the terminal, a traceback or the event log either."""
    rgt, proj = world.rgt, world.proj
    runpod_fake.fail("GET", "/pods/p1", 500, echo_body(runpod_fake, 500, straddle=True), times=1)
    assert rgt("--report", "--format", "json", proj).rc == 0  # one retry, logged with the provider's message
    runpod_fake.fail("GET", "/pods/p1", 503, echo_body(runpod_fake, 503, straddle=True),
                     headers={"Retry-After": "0"}, times=1000)
    assert rgt("--report", "--format", "json", proj).rc == 0
    rgt("up", "c1", proj, "--debug")
    assert rgt("trust", "lam", proj, "--fingerprint", world.fingerprint).rc == 0
    rgt("up", "l1", proj)
    rgt("run", "l1", proj, "--ack", ACK)
    wait_finished(rgt, "l1", proj)
    rgt("pull", "l1", proj)
    rgt("verify", "l1", proj)
    lambda_fake.fail("POST", "/instance-operations/terminate", 401, echo_body(lambda_fake, 401, straddle=True),
                     times=2)
    rgt("down", "l1", proj, "--confirm", "l1", "--debug")
    rgt("down", "l1", proj, "--confirm", "l1")
    rgt("events", proj)

    assert_key_sent(runpod_fake, lambda_fake)
    assert len(lambda_fake.requests("POST", "/instance-operations/terminate")) == 2
    pad = "x" * 40  # the echoed messages really reached the log and the terminal
    assert any(pad in r.getMessage() for r in caplog.records if "retry" in r.getMessage())
    assert any(pad in o.err and "HTTP 401" in o.err for o in rgt.outcomes if o.argv[0] == "down")
    leaks, _ = leaks_everywhere(rgt, caplog, tmp_path, key_home)
    assert not leaks, "a piece of the API key leaked:\n" + "\n".join(leaks)
