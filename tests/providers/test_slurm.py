"""The Slurm command layer against a real loopback cluster and against outputs recorded from it.

The cluster (munged, MariaDB, slurmdbd, slurmctld, slurmd) comes from .ci/setup-slurm.sh; the module fixture
starts a private one for the session and stops it at the end. Jobs run the real job wrapper of
services/runner.py, so each test also shows what the wrapper's own exit_code file says when Slurm ends a job.
Slurm time limits are whole minutes and slurmctld enforces them every 30 s, so the time-limit job is started
first (its wait overlaps the other tests) and its limit is then lowered to zero with scontrol: the TIMEOUT is
still slurmctld's own enforcement.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import TransportError, VerbFailed
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.providers.slurm.commands import (
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    SlurmJob,
    cancel,
    format_duration,
    job_state,
    liveness_of,
    parse_duration,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
    sacct_state,
    submit,
)
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.services.box_layout import ctl_dir
from remote_gpu_trainer.services.launch.launch import wrapper_script
from support.slurm_fixtures import Cluster

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / ".ci" / "setup-slurm.sh"
RECORDED = Path(__file__).parents[1] / "fixtures" / "slurm"
TRANSPORT = LocalTransport(root=None)
JOB_PREFIX = "rgt-test-"


# ---- recorded outputs: the parsers and the liveness mapping ------------------------------------------------

def recorded(name: str) -> dict[str, str]:
    """case -> the line squeue/sacct printed for it (tests/fixtures/slurm/record.py wrote them)."""
    cases = {}
    for line in (RECORDED / name).read_text().splitlines():
        case, _, output = line.partition("\t")
        cases[case] = output
    return cases


def test_recorded_outputs_use_the_formats_the_module_asks_for() -> None:
    formats = recorded("formats.txt")
    assert formats == {"squeue": SQUEUE_FORMAT, "sacct": SACCT_FORMAT}, "re-record: tests/fixtures/slurm/record.py"


# case: (state, reason, exit_code, signal, elapsed, time_limit, liveness, detail)
SQUEUE_EXPECTED = {
    "pending-held": ("PENDING", "JobHeldUser", 0, None, 0, None, "running", "queued: JobHeldUser"),
    "running": ("RUNNING", "", 0, None, 1, 300, "running", "running: 0:01 / 5:00"),
    "completed": ("COMPLETED", "", 0, None, 3, 300, "finished", "exit 0"),
    "failed-exit-3": ("FAILED", "NonZeroExitCode", 3, None, 0, None, "dead", "exit 3"),
    "failed-over-memory": ("FAILED", "JobLaunchFailure", 0, 9, 1, None, "dead", "signal 9 (SIGKILL)"),
    "cancelled": ("CANCELLED", "", 0, 15, 0, None, "dead", "cancelled"),
    "preempted": ("PREEMPTED", "", 0, 15, 1, None, "dead", "preempted"),
    "timeout": ("TIMEOUT", "TimeLimit", 0, 15, 4, 0, "dead", "time limit"),
    "timeout-natural": ("TIMEOUT", "TimeLimit", 0, 15, 77, 60, "dead", "time limit"),
    "node-fail": ("NODE_FAIL", "NodeDown", 0, None, 0, 365 * 86400, "dead", "node failure"),
    "requeued-node-down": ("PENDING", "BeginTime", 0, None, 0, 365 * 86400, "running", "queued: BeginTime"),
    "out-of-memory-cgroup": ("OUT_OF_MEMORY", "OutOfMemory", 0, 125, 0, None, "dead", "oom"),
}

SACCT_EXPECTED = {
    "completed": ("COMPLETED", "", 0, None, 3, 300, "finished", "exit 0"),
    "failed-exit-3": ("FAILED", "", 3, None, 0, None, "dead", "exit 3"),
    "failed-over-memory": ("FAILED", "", 0, 9, 1, None, "dead", "signal 9 (SIGKILL)"),
    "cancelled": ("CANCELLED", "", 0, None, 0, None, "dead", "cancelled by uid 0"),
    "preempted": ("PREEMPTED", "", 0, None, 1, None, "dead", "preempted"),
    "timeout": ("TIMEOUT", "", 0, None, 4, None, "dead", "time limit"),
    "timeout-natural": ("TIMEOUT", "", 0, None, 77, 60, "dead", "time limit"),
    "node-fail": ("NODE_FAIL", "", 0, None, 0, 365 * 86400, "dead", "node failure"),
    "out-of-memory-cgroup": ("OUT_OF_MEMORY", "", 0, 125, 0, None, "dead", "oom"),
}


def summary(job: SlurmJob) -> tuple[object, ...]:
    return (job.state, job.reason, job.exit_code, job.signal, job.elapsed, job.time_limit, *liveness_of(job))


@pytest.mark.parametrize("case", sorted(SQUEUE_EXPECTED))
def test_parse_squeue_recorded(case: str) -> None:
    line = recorded("squeue.txt")[case]
    (job,) = parse_squeue(line + "\n")
    assert job.job_id == line.split("|")[0]
    assert job.source == "squeue"
    assert summary(job) == SQUEUE_EXPECTED[case]


@pytest.mark.parametrize("case", sorted(SACCT_EXPECTED))
def test_parse_sacct_recorded(case: str) -> None:
    line = recorded("sacct.txt")[case]
    (job,) = parse_sacct(line + "\n")
    assert job.job_id == line.split("|")[0]
    assert job.source == "sacct"
    assert summary(job) == SACCT_EXPECTED[case]


def test_every_recorded_case_is_checked() -> None:
    assert set(recorded("squeue.txt")) == set(SQUEUE_EXPECTED)
    assert set(recorded("sacct.txt")) == set(SACCT_EXPECTED)


def test_parse_squeue_reads_several_lines_and_skips_blank_ones() -> None:
    lines = recorded("squeue.txt")
    jobs = parse_squeue(f"{lines['running']}\n\n{lines['failed-exit-3']}\n")
    assert [(j.job_id, j.state) for j in jobs] == [("24", "RUNNING"), ("25", "FAILED")]


@pytest.mark.parametrize("text", [
    "24|RUNNING|0|0:01|5:00|None",          # the format ends every field with "|"
    "24|RUNNING|0|0:01|None|",              # a field missing
    "24|RUNNING|zero|0:01|5:00|None|",      # exit_code is a wait status
    "24|RUNNING|0|soon|5:00|None|",         # not a duration
    "24|running|0|0:01|5:00|None|",         # Slurm states are upper case
    "JOBID|STATE|EXIT_CODE|TIME|TIME_LIMIT|REASON|",  # a header: --noheader was lost
])
def test_parse_squeue_refuses_other_shapes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_squeue(text)


@pytest.mark.parametrize("text", [
    "24|COMPLETED|0|00:00:03|00:05:00|None",      # ExitCode is code:signal
    "24|COMPLETED|0:0|00:00:03|00:05:00",         # a field missing
    "24.batch|COMPLETED|0:0|00:00:03||",          # a step line: --allocations was lost
    "JobID|State|ExitCode|Elapsed|Timelimit|Reason",
])
def test_parse_sacct_refuses_other_shapes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_sacct(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("0:00", 0), ("1:17", 77), ("5:00", 300), ("1:02:03", 3723), ("00:01:00", 60),
    ("1-00:00:00", 86400), ("365-00:00:00", 365 * 86400), ("UNLIMITED", None), ("", None),
    ("Partition_Limit", None), ("NOT_SET", None),
])
def test_parse_duration(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds
    if seconds is not None:
        assert parse_duration(format_duration(seconds)) == seconds


def test_parse_sbatch_plain_and_with_cluster() -> None:
    assert parse_sbatch("4021\n") == "4021"
    assert parse_sbatch((RECORDED / "sbatch-clusters.txt").read_text()) == "33"
    for bad in ("", "Submitted batch job 12\n", "12\n13\n", "abc;rgt\n"):
        with pytest.raises(ValueError):
            parse_sbatch(bad)


@pytest.mark.parametrize(("job", "expected"), [
    (SlurmJob("1", "BRAND_NEW_STATE"), ("unknown", "unrecognised Slurm state 'BRAND_NEW_STATE'")),
    (SlurmJob("1", "REVOKED"), ("unknown", "unrecognised Slurm state 'REVOKED'")),
    (SlurmJob("1", "", source="none", detail="neither squeue nor sacct knows the job"),
     ("unknown", "neither squeue nor sacct knows the job")),
    (SlurmJob("1", "COMPLETED", exit_code=None), ("unknown", "completed without an exit code")),
    (SlurmJob("1", "COMPLETED", exit_code=2), ("dead", "exit 2")),
    (SlurmJob("1", "FAILED", exit_code=137), ("dead", "exit 137 (SIGKILL: out of memory or killed)")),
    (SlurmJob("1", "SUSPENDED", reason="None"), ("stalled", "suspended: None")),
    (SlurmJob("1", "REQUEUE_HOLD", reason="JobHeldAdmin"), ("stalled", "requeue hold: JobHeldAdmin")),
    (SlurmJob("1", "COMPLETING", elapsed=61, time_limit=3600), ("running", "completing: 1:01 / 1:00:00")),
    (SlurmJob("1", "BOOT_FAIL"), ("dead", "node boot failure")),
    (SlurmJob("1", "DEADLINE"), ("dead", "deadline passed")),
])
def test_liveness_mapping(job: SlurmJob, expected: tuple[str, str]) -> None:
    assert liveness_of(job) == expected


def test_walltime_for_the_meter() -> None:
    job = SlurmJob("1", "RUNNING", elapsed=3725, time_limit=2 * 86400)
    assert job.walltime() == "1:02:05 / 2-00:00:00"
    assert job.remaining == 2 * 86400 - 3725
    assert SlurmJob("1", "RUNNING", elapsed=5).walltime() == "0:05 / unlimited"
    assert SlurmJob("1", "RUNNING", elapsed=5).remaining is None


async def test_job_ids_are_checked_before_any_command_runs() -> None:
    for bad in ("1; touch /tmp/rgt-pwned", "", "12 13", "$(id)"):
        with pytest.raises(ValueError):
            await job_state(TRANSPORT, bad)
        with pytest.raises(ValueError):
            await cancel(TRANSPORT, bad)


def test_slurm_profile() -> None:
    """Nothing to tear down but the job: scancel deletes no file, yet cannot be undone, so the gate applies."""
    profile = load_profile("slurm")
    assert (profile.id, profile.kind) == ("slurm", "slurm")
    assert profile.pricing.compute_per_hour is None and profile.pricing.source == "user"
    (cancel_action,) = profile.actions
    assert (cancel_action.id, cancel_action.destroys, cancel_action.reversible) == ("cancel", (), False)
    assert cancel_action.needs_gate
    assert profile.raw["detach"]["primitive"] == "sbatch"
    assert {clock["verified"] for clock in profile.raw["danger_clocks"]} == {"2026-06"}
    assert profile.raw["spot"]["verified"] == "2026-06"
    templates = profile.raw["control"]["cli"]
    assert SQUEUE_FORMAT in templates["status"] and SACCT_FORMAT in templates["accounting"]


# ---- the real cluster ----------------------------------------------------------------------------------------

def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Job:
    job_id: str
    run: RunConfig

    @property
    def ctl(self) -> Path:
        return Path(ctl_dir(self.run))

    async def wrapper_exit(self, wait: float = 0.0) -> str | None:
        """The wrapper's own exit_code file. Slurm reports CANCELLED, PREEMPTED or TIMEOUT as soon as it
        decides, while the job's processes are still being signalled, so callers may give it a moment."""
        path = self.ctl / "exit_code"
        deadline = time.monotonic() + wait
        while not path.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return path.read_text().strip() if path.exists() else None

    async def cell_started(self, limit: float = 15) -> None:
        """Wait until the wrapper has started its cell (its signal trap is set by then). slurmctld says RUNNING
        before slurmd has even started the script; a job signalled in between dies without an exit_code."""
        log = Path(self.run.workdir) / self.run.log
        deadline = time.monotonic() + limit
        while not (log.exists() and "cell c0 started" in log.read_text()):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {self.job_id}: the wrapper never started its cell")
            await asyncio.sleep(0.1)


def make_run(base: Path, command: str) -> RunConfig:
    """A one-cell run in a workdir whose name needs quoting (space and apostrophe) on every command line."""
    workdir = base / "work dir's"
    run = RunConfig(id="exp", instance="cluster", workdir=str(workdir), command=command, log="train.log",
                    remote_root=str(base / "results"), roster=("c0",), required=("result.txt",))
    Path(ctl_dir(run)).mkdir(parents=True)
    (workdir / "job.sh").write_text(wrapper_script(run, TRANSPORT))
    return run


async def start_job(base: Path, command: str, name: str, *, time_limit: int | None = None,
                    extra: tuple[str, ...] = ()) -> Job:
    run = make_run(base, command)
    job_id = await submit(TRANSPORT, "job.sh", job_name=JOB_PREFIX + name, workdir=run.workdir,
                          output=f"{run.workdir}/slurm-%j.out", time_limit=time_limit, extra_args=extra)
    return Job(job_id, run)


async def wait_until(job_id: str, done: set[str], limit: float) -> tuple[SlurmJob, list[str]]:
    """Poll job_state until the state is in `done`; returns the last answer and every state seen in order."""
    seen: list[str] = []
    deadline = time.monotonic() + limit
    while True:
        job = await job_state(TRANSPORT, job_id, timeout=10)
        if not seen or seen[-1] != job.state:
            seen.append(job.state)
        if job.state in done:
            return job, seen
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} never reached {done}; states seen: {seen}")
        await asyncio.sleep(0.2)


async def accounted(job_id: str, state: str, limit: float = 15) -> SlurmJob:
    """sacct's record, once slurmctld has sent the end of the job to slurmdbd (asynchronous)."""
    deadline = time.monotonic() + limit
    while True:
        job = await sacct_state(TRANSPORT, job_id, timeout=10)
        if job.state == state or time.monotonic() > deadline:
            return job
        await asyncio.sleep(0.2)


TERMINAL = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture(scope="module")
def timeout_job(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Job:
    """Submitted before the other live tests so that waiting for slurmctld's 30 s limit check overlaps them."""
    base = tmp_path_factory.mktemp("slurm-timeout")

    async def start() -> Job:
        job = await start_job(base, "sleep 300", "timeout", time_limit=1)
        running, _ = await wait_until(job.job_id, {"RUNNING"} | TERMINAL, limit=30)
        assert running.state == "RUNNING" and running.time_limit == 60, running
        await job.cell_started()
        return job

    job = asyncio.run(start())
    scontrol("update", f"JobId={job.job_id}", "TimeLimit=0")
    return job


async def test_held_job_is_queued_then_runs_the_wrapper_and_finishes(timeout_job: Job, tmp_path: Path) -> None:
    job = await start_job(tmp_path, "sleep 2 && echo done > {out}/result.txt", "complete", time_limit=5,
                          extra=("--hold",))
    queued = await job_state(TRANSPORT, job.job_id)
    assert (queued.state, queued.reason, queued.time_limit, queued.source) == ("PENDING", "JobHeldUser", 300,
                                                                              "squeue")
    assert liveness_of(queued) == ("running", "queued: JobHeldUser")
    name = subprocess.run(["squeue", "--noheader", f"--jobs={job.job_id}", "--format=%j"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert name == "rgt-test-complete"

    scontrol("release", job.job_id)
    final, seen = await wait_until(job.job_id, TERMINAL, limit=30)
    assert "RUNNING" in seen, seen
    assert (final.state, final.exit_code, final.signal) == ("COMPLETED", 0, None)
    assert liveness_of(final) == ("finished", "exit 0")
    assert final.elapsed is not None and final.elapsed >= 2 and final.time_limit == 300
    assert final.walltime().endswith(" / 5:00")
    assert await job.wrapper_exit() == "0" and (job.ctl / "DONE").exists()
    assert (Path(job.run.remote_root) / "c0" / "result.txt").read_text() == "done\n"
    assert (Path(job.run.workdir) / f"slurm-{job.job_id}.out").exists()
    record = await accounted(job.job_id, "COMPLETED")
    assert (record.source, record.state, record.exit_code, record.elapsed) == ("sacct", "COMPLETED", 0,
                                                                               final.elapsed)


async def test_failing_job_is_dead_with_its_exit_code(cluster: Cluster, tmp_path: Path) -> None:
    job = await start_job(tmp_path, "sleep 1; exit 3", "fail")
    final, _ = await wait_until(job.job_id, TERMINAL, limit=30)
    assert (final.state, final.exit_code) == ("FAILED", 3)
    assert liveness_of(final) == ("dead", "exit 3")
    assert await job.wrapper_exit() == "3" and not (job.ctl / "DONE").exists()
    record = await accounted(job.job_id, "FAILED")
    assert liveness_of(record) == ("dead", "exit 3")


async def test_scancel_ends_the_job_as_cancelled(cluster: Cluster, tmp_path: Path) -> None:
    job = await start_job(tmp_path, "sleep 300", "cancel")
    await wait_until(job.job_id, {"RUNNING"}, limit=30)
    await job.cell_started()
    await cancel(TRANSPORT, job.job_id)
    final, _ = await wait_until(job.job_id, TERMINAL, limit=30)
    assert final.state == "CANCELLED"
    assert liveness_of(final) == ("dead", "cancelled")
    assert await job.wrapper_exit(wait=5) == "143"  # Slurm sends SIGTERM first; the wrapper records it
    await cancel(TRANSPORT, job.job_id)  # cancelling an ended job is not an error
    record = await accounted(job.job_id, "CANCELLED")
    assert liveness_of(record) == ("dead", "cancelled by uid 0")


async def test_preempted_job_is_dead_preempted(cluster: Cluster, tmp_path: Path) -> None:
    victim = await start_job(tmp_path / "victim", "sleep 300", "victim", extra=("--partition=scavenger",
                                                                              "--mem=3500M"))
    await wait_until(victim.job_id, {"RUNNING"}, limit=30)
    await victim.cell_started()
    preemptor = await start_job(tmp_path / "preemptor", "echo ok > {out}/result.txt", "preemptor",
                                extra=("--mem=1000M",))
    final, _ = await wait_until(victim.job_id, TERMINAL, limit=30)
    assert final.state == "PREEMPTED"
    assert liveness_of(final) == ("dead", "preempted")
    assert await victim.wrapper_exit(wait=5) == "143"
    done, _ = await wait_until(preemptor.job_id, TERMINAL, limit=30)
    assert liveness_of(done) == ("finished", "exit 0")


async def test_memory_overrun_without_cgroups_is_a_sigkill_the_wrapper_cannot_record(
        cluster: Cluster, tmp_path: Path) -> None:
    python = shlex.quote(sys.executable)
    job = await start_job(tmp_path, f"{python} -c 'import time; b = bytearray(300 << 20); time.sleep(20)'",
                          "memory", extra=("--mem=50M",))
    final, _ = await wait_until(job.job_id, TERMINAL, limit=30)
    assert (final.state, final.signal) == ("FAILED", 9)
    assert liveness_of(final) == ("dead", "signal 9 (SIGKILL)")
    assert await job.wrapper_exit(wait=2) is None  # the whole step was killed: only Slurm can say how it ended


async def test_time_limit_is_dead_time_limit(timeout_job: Job) -> None:
    final, _ = await wait_until(timeout_job.job_id, TERMINAL, limit=50)
    assert (final.state, final.reason) == ("TIMEOUT", "TimeLimit")
    assert liveness_of(final) == ("dead", "time limit")
    assert await timeout_job.wrapper_exit(wait=5) == "143"  # SIGTERM first, SIGKILL only after KillWait
    record = await accounted(timeout_job.job_id, "TIMEOUT")
    assert liveness_of(record) == ("dead", "time limit")


async def test_a_job_slurm_never_heard_of_is_unknown_not_dead(cluster: Cluster) -> None:
    job = await job_state(TRANSPORT, "987654321")
    assert (job.state, job.source) == ("", "none")
    assert liveness_of(job) == ("unknown", "neither squeue nor sacct knows the job")


async def test_a_cluster_without_accounting_answers_unknown_once_squeue_forgets(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "no-accounting.conf"
    conf.write_text(re.sub(r"(?m)^AccountingStorageType=.*$", "AccountingStorageType=accounting_storage/none",
                           cluster.conf.read_text()))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    job = await job_state(TRANSPORT, "987654321")
    assert (job.state, job.source) == ("", "none")
    assert liveness_of(job) == ("unknown", "squeue no longer knows the job and this cluster keeps no accounting")


async def test_sbatch_with_clusters_answers_id_and_cluster(cluster: Cluster, tmp_path: Path) -> None:
    job = await start_job(tmp_path, "true", "clusters", extra=("--clusters=rgt", "--hold"))
    assert job.job_id.isdigit()
    assert (await job_state(TRANSPORT, job.job_id)).state == "PENDING"
    await cancel(TRANSPORT, job.job_id)


async def test_sbatch_refusal_is_a_failed_verb(cluster: Cluster, tmp_path: Path) -> None:
    run = make_run(tmp_path, "true")
    with pytest.raises(VerbFailed, match="Invalid --time specification"):
        await submit(TRANSPORT, "job.sh", job_name=JOB_PREFIX + "refused", workdir=run.workdir,
                     output=f"{run.workdir}/out", time_limit="soon")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _unreachable_conf(cluster: Cluster, tmp_path: Path, fast: bool) -> Path:
    """The cluster's config pointed at a port nobody listens on: a controller that cannot be reached."""
    text = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={_closed_port()}", cluster.conf.read_text())
    if fast:
        text += "MessageTimeout=1\n"
    conf = tmp_path / "unreachable.conf"
    conf.write_text(text)
    return conf


async def test_unreachable_controller_is_a_transport_error(cluster: Cluster, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(_unreachable_conf(cluster, tmp_path, fast=True)))
    with pytest.raises(TransportError, match="could not reach Slurm"):
        await job_state(TRANSPORT, "1")
    with pytest.raises(TransportError, match="could not reach Slurm"):
        await cancel(TRANSPORT, "1")
    run = make_run(tmp_path, "true")
    with pytest.raises(TransportError, match="could not reach Slurm"):
        await submit(TRANSPORT, "job.sh", job_name=JOB_PREFIX + "unreachable", workdir=run.workdir,
                     output=f"{run.workdir}/out")


async def test_a_hanging_controller_is_cut_off_by_the_timeout(cluster: Cluster, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(_unreachable_conf(cluster, tmp_path, fast=False)))
    started = time.monotonic()
    with pytest.raises(TransportError, match="did not answer within 1s"):
        await job_state(TRANSPORT, "1", timeout=1)
    assert time.monotonic() - started < 5  # squeue alone retries for ~18 s here


async def test_a_lost_instance_disk_is_a_transport_error(tmp_path: Path) -> None:
    gone = LocalTransport(root=tmp_path / "no-such-box")
    with pytest.raises(TransportError):
        await job_state(gone, "1")
