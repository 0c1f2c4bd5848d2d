"""Phase-0 environment audit (docs/remote-ops.md §4).

Part 1 runs the REAL survey (remote/env_survey.sh) through LocalTransport on this machine and checks its
facts against what Python reads directly (statvfs, /proc, the cgroup files, a real write on a temp durable
dir, real device ids of /dev/shm vs the temp dir). nvidia-smi is kept off PATH so the box is in the
"no GPU" state whatever machine runs the tests; one run puts a stand-in nvidia-smi (a replay of recorded
outputs, tests/fixtures/gpu/fake_nvidia_smi.sh) on PATH to drive the probe's GPU branch.
Part 2 applies every row's thresholds to constructed facts at each boundary.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import math
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits import env_audit as ea
from remote_gpu_trainer.audits import gpu_health as gh
from remote_gpu_trainer.audits.env_audit.limits import IDLE_MEMORY_RATIO
from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.services.launch.env_audit import parse_survey_output, run_env_survey, survey_script
from remote_gpu_trainer.services.watch.gpu_samples import sample_gpus

GPU = Path(__file__).parents[1] / "fixtures" / "gpu"
MiB = 1 << 20
GiB = 1 << 30


# ==== part 1: the real probe on this machine ========================================================

def _path_without_nvidia_smi() -> str:
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "nvidia-smi")))


def _probe(env: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        for key in ("CONDA_EXE", "HF_HOME", "RGT_PROBE_BUDGET_S"):
            mp.delenv(key, raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        return asyncio.run(run_env_survey(LocalTransport(), **kwargs))


class Box:
    """The real probe's answer on this machine and the paths it was given."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.durable = root / "durable"
        self.work = root / "work"
        self.hf_store = root / "hf-store"
        for d in (self.home / ".cache" / "pip", self.durable, self.work, self.hf_store):
            d.mkdir(parents=True)
        (self.home / ".cache" / "pip" / "wheel.bin").write_bytes(os.urandom(MiB))
        (self.hf_store / "model.bin").write_bytes(os.urandom(2 * MiB))
        (self.home / ".cache" / "huggingface").symlink_to(self.hf_store)
        self.shm_staging = f"/dev/shm/rgt-test-{os.getpid()}-absent/.partial"
        self.vfs_before = {p: os.statvfs(p) for p in ("/dev/shm", str(self.durable))}
        started = time.time()
        # OMP_NUM_THREADS=1 as a user's shell often exports it: nproc still counts the box's CPUs
        self.facts = _probe({"HOME": str(self.home), "PATH": _path_without_nvidia_smi(), "OMP_NUM_THREADS": "1"},
                            scratch="/dev/shm", durable=str(self.durable), python=sys.executable,
                            workdir=str(self.work),
                            staging_pairs=[(str(self.work / "export" / ".partial"), str(self.work)),
                                           (self.shm_staging, str(self.work))])
        self.wall = time.time() - started
        self.vfs_after = {p: os.statvfs(p) for p in ("/dev/shm", str(self.durable))}

    def between(self, path: str, value: int | None, read: Any) -> bool:
        """`value` lies between what statvfs said just before and just after the probe (other processes
        write to the same disk meanwhile), give or take 64 MiB."""
        low, high = sorted((read(self.vfs_before[path]), read(self.vfs_after[path])))
        return value is not None and low - 64 * MiB <= value <= high + 64 * MiB


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    return Box(tmp_path_factory.mktemp("envprobe"))


def test_probe_answers_one_versioned_object(box: Box) -> None:
    assert next(iter(box.facts)) == "version" and box.facts["version"] == ea.SURVEY_VERSION
    assert box.facts["client_sent_at"] - 1 <= box.facts["now"] <= box.facts["client_received_at"]
    assert box.facts["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert box.facts["uid"] == os.getuid() and box.facts["have_timeout"] is True
    assert box.facts["args"] == {"scratch": "/dev/shm", "durable": str(box.durable), "python": sys.executable,
                                 "workdir": str(box.work)}
    assert box.wall < 30


@pytest.mark.parametrize("role, path", [("scratch", "/dev/shm"), ("durable", None)])
def test_df_numbers_equal_statvfs(box: Box, role: str, path: str | None) -> None:
    where = path or str(box.durable)
    disk = box.facts["disks"][role]
    row = ea.parse_df(disk["bytes"]["out"])
    inodes = ea.parse_df(disk["inodes"]["out"])
    vfs = box.vfs_after[where]
    assert row.total == vfs.f_blocks * vfs.f_frsize and inodes.total == vfs.f_files
    assert box.between(where, row.avail, lambda v: v.f_bavail * v.f_frsize)
    assert box.between(where, row.used, lambda v: (v.f_blocks - v.f_bfree) * v.f_frsize)
    assert box.between(where, inodes.avail, lambda v: v.f_favail)
    mount = ea.parse_findmnt(disk["mount"]["out"])
    assert mount is not None and mount["TARGET"] == row.target
    assert os.stat(mount["TARGET"]).st_dev == os.stat(where).st_dev


def test_row1_and_row2_from_real_df(box: Box) -> None:
    rows = {r.id: r for r in ea.audit_environment(box.facts, ea.RunRequirements())}
    vfs = os.statvfs(box.durable)
    pct = 100 * (vfs.f_blocks - vfs.f_bfree) / (vfs.f_blocks - vfs.f_bfree + vfs.f_bavail)
    assert f"durable {box.durable} on " in rows[1].detail
    assert rows[1].status == ea._use_status(pct)  # the audit's verdict for what Python itself measures
    assert rows[2].detail.startswith("scratch /dev/shm on /dev/shm:")


def _cgroup_fs_type() -> str:
    return next(line.split()[2] for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[1] == "/sys/fs/cgroup")


def _own_memory_limit_file() -> Path:
    """This process's own memory-limit file, found independently of the probe (the probe is our child)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    if _cgroup_fs_type() == "cgroup2":
        rel = next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
        own = Path("/sys/fs/cgroup" + rel.rstrip("/")) / "memory.max"
        return own if own.exists() else Path("/sys/fs/cgroup/memory.max")
    rel = next(line.split(":", 2)[2] for line in lines if "memory" in line.split(":", 2)[1].split(","))
    own = Path("/sys/fs/cgroup/memory" + rel.rstrip("/")) / "memory.limit_in_bytes"
    return own if own.exists() else Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")


def test_cgroup_and_cpu_facts_match_the_files(box: Box) -> None:
    cgroup = box.facts["cgroup"]
    assert cgroup["version"] == (2 if _cgroup_fs_type() == "cgroup2" else 1)
    assert cgroup["memory_limits"][0] == _own_memory_limit_file().read_text().strip()
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    assert box.facts["mem_total_kb"] == int(meminfo["MemTotal"].split()[0])
    assert box.facts["nproc"] == len(os.sched_getaffinity(0))
    limit, _ = ea.memory_limit_bytes(box.facts)
    numeric = [int(v) for v in cgroup["memory_limits"] if v.isdigit() and int(v) < ea.NO_LIMIT_BYTES]
    assert limit == (min(numeric) if numeric else box.facts["mem_total_kb"] * 1024)
    rows = {r.id: r for r in ea.audit_environment(box.facts, ea.RunRequirements())}
    # PASS on an idle machine without a tight quota; a container limited to fewer CPUs than half its visible
    # ones, or one already near its memory limit, warns: the expectation follows this machine's own facts
    quota = ea.cpu_quota(box.facts)
    oversubscribed = quota is not None and len(os.sched_getaffinity(0)) > 2 * quota
    assert rows[6].status == (ea.WARN if oversubscribed else ea.PASS), rows[6]
    current = str(cgroup.get("memory_current", "")).strip()
    near_limit = current.isdigit() and limit is not None and int(current) / limit > IDLE_MEMORY_RATIO
    assert rows[5].status == (ea.WARN if near_limit else ea.PASS), rows[5]
    assert f"nproc {len(os.sched_getaffinity(0))}" in rows[6].detail


def test_durable_write_test_is_real_and_leaves_nothing(box: Box) -> None:
    write = box.facts["durable_write"]
    assert write == {"path": write["path"], "written": True, "read_back": True, "removed": True, "error": ""}
    assert write["path"].startswith(str(box.durable) + "/.rgt-probe-")
    assert list(box.durable.iterdir()) == []
    rows = {r.id: r for r in ea.audit_environment(box.facts, ea.RunRequirements(root_is_ephemeral=False))}
    assert rows[11].status == ea.PASS and "write/read OK" in rows[11].detail


def test_same_filesystem_on_real_dirs(box: Box) -> None:
    same, different = box.facts["same_fs"]
    assert same["staging_at"] == str(box.work) and same["staging_dev"] == os.stat(box.work).st_dev
    assert different["staging_at"] == "/dev/shm" and different["staging_dev"] == os.stat("/dev/shm").st_dev
    assert different["final_dev"] == os.stat(box.work).st_dev != os.stat("/dev/shm").st_dev
    row = ea.same_filesystem(box.facts, ea.RunRequirements())
    assert row.status == ea.FAIL
    assert f"{box.work}/export/.partial → {box.work}: same filesystem" in row.detail
    assert f"{box.shm_staging} → {box.work}: different filesystems" in row.detail


def test_no_gpu_state_on_this_machine(box: Box) -> None:
    assert box.facts["nvidia_smi"] is None and box.facts["gpus"] is None and box.facts["kernel_log"] is None
    cpu = {r.id: r for r in ea.audit_environment(box.facts, ea.RunRequirements(gpus=0))}
    assert (cpu[7].status, cpu[7].detail) == (ea.PASS, "no GPU (CPU run)")
    assert (cpu[13].status, cpu[13].detail) == (ea.PASS, "no GPU (CPU run)")
    assert cpu[14].status == ea.SKIPPED
    gpu = {r.id: r for r in ea.audit_environment(box.facts, ea.RunRequirements(gpus=1))}
    assert gpu[7].status == ea.FAIL and "nvidia-smi missing" in gpu[7].detail
    assert gpu[8].status == ea.FAIL and "the run wants 1" in gpu[8].detail
    assert gpu[13].status == ea.SKIPPED


def test_torch_seen_by_the_runs_interpreter(box: Box) -> None:
    info, why = ea.torch_facts(box.facts)
    assert why == "" and info is not None
    assert info["torch"] == importlib.metadata.version("torch") and info["executable"] == sys.executable
    assert info["available"] is False and info["count"] == 0
    row = ea.torch_sees_gpus(box.facts, ea.RunRequirements())
    assert row.status == ea.PASS and row.detail.endswith("(CPU run)")


def test_hidden_caches_measured_and_resolved(box: Box) -> None:
    caches = {c["path"]: c for c in box.facts["caches"]}
    pip = caches[str(box.home / ".cache" / "pip")]
    hf = caches[str(box.home / ".cache" / "huggingface")]
    assert hf["resolved"] == str(box.hf_store) and pip["resolved"] == pip["path"]
    pip_bytes, _ = ea._du_bytes(pip["du"])
    hf_bytes, _ = ea._du_bytes(hf["du"])
    assert pip_bytes is not None and MiB <= pip_bytes <= MiB + 64 * 1024
    assert hf_bytes is not None and 2 * MiB <= hf_bytes <= 2 * MiB + 64 * 1024
    row = ea.hidden_caches(box.facts, ea.RunRequirements(capped_tier_bytes=0))
    assert row.status == ea.PASS and f"→ {box.hf_store}" in row.detail


def test_baseline_records_boot_id_and_no_skew(box: Box) -> None:
    row = ea.baseline(box.facts, ea.RunRequirements())
    assert row.status == ea.PASS and row.detail == f"boot_id {box.facts['boot_id']}, clock skew +0 s"


def test_odd_arguments_travel_as_data_and_json_survives(tmp_path: Path) -> None:
    """Quotes, backslashes, newlines, a command substitution and non-UTF-8 bytes in every argument:
    nothing runs, the JSON parses, and invalid UTF-8 comes back as U+FFFD."""
    odd = os.fsdecode(b'we"ird \\ $(touch PWNED) \n caf\xe9 \x01')
    work = tmp_path / odd
    work.mkdir()
    durable = str(tmp_path / "absent durable")
    python = str(tmp_path / f"no such {odd} python")
    facts = _probe({"HOME": str(tmp_path), "PATH": _path_without_nvidia_smi()}, scratch=str(tmp_path),
                   durable=durable, python=python, workdir=str(work),
                   staging_pairs=[(str(work / ".partial"), str(work))])
    def shown(text: str) -> str:
        return os.fsencode(text).decode("utf-8", errors="replace")
    assert facts["args"] == {"scratch": str(tmp_path), "durable": durable, "python": shown(python),
                             "workdir": shown(str(work))}
    assert facts["workdir_exists"] is True and facts["same_fs"][0]["staging_at"] == shown(str(work))
    assert not any(p.name == "PWNED" for p in tmp_path.rglob("*"))
    assert not Path("PWNED").exists()
    rows = {r.id: r for r in ea.audit_environment(facts, ea.RunRequirements())}
    assert rows[8].status == ea.FAIL and "not found (exit 127)" in rows[8].detail
    assert rows[11].status == ea.FAIL and "not a directory" in rows[11].detail
    assert rows[1].status == ea.FAIL and "No such file or directory" in rows[1].detail
    assert rows[10].status == ea.PASS


def _awks() -> list[str]:
    """Every awk on this machine the escaper can meet on a box: gawk, mawk, busybox awk (the default is one)."""
    found = [shutil.which(name) for name in ("awk", "gawk", "mawk", "original-awk")]
    awks = sorted({os.path.realpath(p) for p in found if p})
    busybox = shutil.which("busybox")
    if busybox and subprocess.run([busybox, "awk", "BEGIN{}"], check=False).returncode == 0:
        awks.append(f"{busybox} awk")
    return awks


def test_json_escaper_is_exact_for_any_bytes_in_every_awk(tmp_path: Path) -> None:
    """The probe's pure-awk escaper (see the script's header for why not python3) against quotes,
    backslashes, control characters, newlines, NULs and invalid UTF-8, in each awk present here."""
    source = survey_script().decode()
    function = re.search(r"^jesc\(\) \{.*?^\}", source, re.S | re.M)
    assert function is not None
    rng = random.Random(20261129)
    alphabet = b'\\"\n\r\t\x00\x01\x1f\x7fab \xff\xc3\xa9\xe2\x82'
    cases = [b"", b"\n", b'a"b\\c\n', b"\\", b"x\\", b'\\\\\\"', b"\n\n\n", bytes(range(256)),
             b"caf\xe9 \xe2\x82\xac ok \xe2\"", b"tab\there\r\n\x01\x1f\x7f"]
    cases += [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(60)]
    awks = _awks()
    assert awks
    for awk in awks:
        shim = tmp_path / "bin" / os.path.basename(awk.split()[0]) / "awk"
        shim.parent.mkdir(parents=True)
        shim.write_text(f'#!/bin/sh\nexec {awk} "$@"\n')
        shim.chmod(stat.S_IRWXU)
        env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
        for case in cases:
            out = subprocess.run(["bash", "-c", function.group(0) + "\njesc"], input=case, env=env,
                                 capture_output=True, check=True).stdout
            expected = case.replace(b"\x00", b"")
            expected = expected[:-1] if expected.endswith(b"\n") else expected
            decoded = json.loads(out.decode("utf-8", errors="replace"))
            assert decoded == expected.decode("utf-8", errors="replace"), (awk, case, out)


def test_every_command_respects_the_deadline(tmp_path: Path) -> None:
    started = time.time()
    facts = _probe({"HOME": str(tmp_path), "PATH": _path_without_nvidia_smi(), "RGT_PROBE_BUDGET_S": "0"},
                   scratch=str(tmp_path), durable=str(tmp_path), python=sys.executable, workdir=str(tmp_path),
                   staging_pairs=[])
    assert time.time() - started < 10
    assert facts["budget_s"] == 0
    assert facts["disks"]["durable"]["bytes"]["rc"] == 124 and facts["torch"]["rc"] == 124
    rows = {r.id: r for r in ea.audit_environment(facts, ea.RunRequirements())}
    assert rows[1].status == ea.FAIL and "df timed out" in rows[1].detail
    assert rows[8].status == ea.FAIL and "timed out" in rows[8].detail
    assert rows[11].status == ea.FAIL
    assert rows[10].status == ea.SKIPPED


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A PATH whose nvidia-smi replays the 8×H100 recordings and accepts only the audit's field lists."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    shutil.copy(GPU / "fake_nvidia_smi.sh", bin_dir / "nvidia-smi")
    (bin_dir / "nvidia-smi").chmod(stat.S_IRWXU)
    data = tmp_path / "nvsmi"
    data.mkdir()
    shutil.copy(GPU / "h100x8_inventory.csv", data / "inventory.csv")
    lines = (GPU / "h100x8_idle_samples.csv").read_text().splitlines(keepends=True)
    (data / "samples.csv").write_text("".join(lines[:8]))
    shutil.copy(GPU / "compute_apps_one.csv", data / "compute_apps.csv")
    yield {"PATH": f"{bin_dir}{os.pathsep}{_path_without_nvidia_smi()}", "FAKE_NVSMI_DIR": str(data),
           "FAKE_NVSMI_INVENTORY_QUERY": ",".join(gh.INVENTORY_FIELDS),
           "FAKE_NVSMI_SAMPLE_QUERY": ",".join(gh.SAMPLE_FIELDS), "HOME": str(tmp_path)}


def _dmesg_readable() -> bool:
    result = subprocess.run(["dmesg"], capture_output=True, check=False)
    return result.returncode == 0 and bool(result.stdout.strip())


def test_probe_gpu_branch_with_an_old_driver(fake_nvidia_smi: dict[str, str], tmp_path: Path) -> None:
    facts = _probe({**fake_nvidia_smi, "FAKE_NVSMI_OLD_DRIVER": "1"}, scratch=str(tmp_path),
                   durable=str(tmp_path), python=str(tmp_path / "absent-python"), workdir=str(tmp_path),
                   staging_pairs=[])
    block = facts["gpu_samples"]
    assert block["throttle_field"] == "clocks_throttle_reasons.active"
    assert block["fields"] == ",".join(gh.SAMPLE_FIELDS)
    assert [s["rc"] for s in block["samples"]] == [0] * 5
    assert facts["elapsed_s"] >= 4  # five samples one second apart
    assert facts["compute_apps"] == {"rc": 0, "out": "4242"}
    assert facts["device_holders"]["tool"] in ("fuser", "lsof", "none")
    assert facts["kernel_log"]["source"] in ("dmesg", "journalctl")
    report = gh.health_from_facts(facts)
    assert len(report.gpus) == 8 and all(g.samples == 5 for g in report.gpus)
    assert report.overall == (gh.PASS if _dmesg_readable() else gh.WARN)
    rows = {r.id: r for r in ea.audit_environment(facts, ea.RunRequirements(gpus=8, gpu_memory_mib=80_000))}
    assert rows[7].status == ea.PASS and rows[7].detail.startswith("8× NVIDIA H100 80GB HBM3 (80 GiB)")
    assert rows[13].status == report.overall
    assert rows[14].status == (ea.PASS if facts["device_holders"]["tool"] != "none" else ea.SKIPPED)


@pytest.mark.parametrize("old_driver", [False, True])
def test_live_sampler(fake_nvidia_smi: dict[str, str], old_driver: bool) -> None:
    env = {**fake_nvidia_smi, **({"FAKE_NVSMI_OLD_DRIVER": "1"} if old_driver else {})}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        found = asyncio.run(sample_gpus(LocalTransport()))
    assert found is not None and [s.index for s in found] == list(range(8))
    assert found[0].memory_total_mib == 81559 and found[0].throttle_reasons == 0x1


def test_live_sampler_without_nvidia_smi_is_no_gpu() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", _path_without_nvidia_smi())
        assert asyncio.run(sample_gpus(LocalTransport())) is None


def test_a_probe_past_its_deadline_is_a_one_line_transport_error(tmp_path: Path) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 60\n")  # far beyond the bound below, so a loaded machine cannot blur them
    slow.chmod(stat.S_IRWXU)
    started = time.time()
    with pytest.raises(TransportError) as caught:
        _probe({"HOME": str(tmp_path), "PATH": _path_without_nvidia_smi()}, scratch=str(tmp_path),
               durable=str(tmp_path), python=str(slow), workdir=str(tmp_path), staging_pairs=[], timeout=1.0)
    assert time.time() - started < 20
    assert str(caught.value) == "environment probe got no answer within 1 s: state unknown, retry later"


def test_an_unreachable_box_is_a_one_line_transport_error(tmp_path: Path) -> None:
    gone = LocalTransport(root=tmp_path / "deleted-instance-disk")
    with pytest.raises(TransportError, match="^environment probe could not reach the box: instance disk") as caught:
        asyncio.run(run_env_survey(gone, scratch="/", durable="/", python="python3", workdir="/", staging_pairs=[]))
    assert "\n" not in str(caught.value)


def test_the_script_ships_as_package_data_with_lf_endings() -> None:
    script = survey_script()
    assert b"\r" not in script and script.startswith(b"# rgt environment probe")
    assert f'RGT_PROBE_VERSION="{ea.SURVEY_VERSION}"'.encode() in script
    assert ",".join(gh.SAMPLE_FIELDS).encode() in script and ",".join(gh.INVENTORY_FIELDS).encode() in script


@pytest.mark.parametrize("stdout, message", [
    (b"", "not one JSON object"),
    (b"Welcome to Ubuntu\n{\"version\": \"rgt-env-probe/1\"}", "not one JSON object"),
    (b'{"version": "rgt-env-probe/1"}{"version": "rgt-env-probe/1"}', "not one JSON object"),
    (b'{"now": 1, "version": "rgt-env-probe/1"}', "first field is not the script version"),
    (b'{"version": "rgt-env-probe/0"}', "version 'rgt-env-probe/0'"),
    (b'{"version": "rgt-env-probe/1", "now": 1, "now": 2}', "duplicate key"),
    (b'{"version": "rgt-env-probe/1", "now": NaN}', "NaN"),
    (b'{"version": "rgt-env-probe/1", "error": "usage: ..."}', "refused its arguments"),
    (b"[1, 2]", "first field"),
])
def test_probe_output_is_parsed_strictly(stdout: bytes, message: str) -> None:
    with pytest.raises(TransportError, match=message.replace("(", r"\(")):
        parse_survey_output(stdout)


def test_probe_output_keeps_invalid_utf8_as_replacement() -> None:
    facts = parse_survey_output(b'{"version": "rgt-env-probe/1", "hostname": "caf\xe9"}\n')
    assert facts["hostname"] == "caf\ufffd"


# ==== part 2: thresholds on constructed facts =======================================================

NOW = 1_800_000_000


def df_bytes(target: str, size: int, used: int, avail: int) -> dict[str, Any]:
    pct = math.ceil(100 * used / (used + avail)) if used + avail else 0
    return {"rc": 0, "out": f"Mounted on        1B-blocks          Used         Avail Use%\n"
                            f"{target:<12} {size:>14} {used:>13} {avail:>13} {pct:>3}%\n"}


def df_inodes(target: str, total: int | None, used: int | None, avail: int | None) -> dict[str, Any]:
    def cell(n: int | None) -> str:
        return "-" if n is None else str(n)
    pct = "-" if not total or used is None or avail is None else f"{math.ceil(100 * used / (used + avail))}%"
    return {"rc": 0, "out": f"Mounted on       Inodes    IUsed    IFree IUse%\n"
                            f"{target:<12} {cell(total):>10} {cell(used):>9} {cell(avail):>9} {pct:>4}\n"}


def findmnt(target: str, fstype: str, source: str) -> dict[str, Any]:
    return {"rc": 0, "out": f'TARGET="{target}" FSTYPE="{fstype}" SOURCE="{source}"\n'}


def torch_out(**info: Any) -> dict[str, Any]:
    base = {"python": "3.11.9", "executable": "/opt/venv/bin/python", "torch": "2.4.1+cu124", "cuda": "12.4",
            "available": True, "count": 8, "capability": [[9, 0]] * 8}
    base.update(info)
    return {"rc": 0, "out": "/opt/venv/lib/python3.11/site-packages/torch/__init__.py:1: UserWarning: x\n"
                            "RGT_TORCH=" + json.dumps(base)}


def healthy() -> dict[str, Any]:
    """A clean 8×H100 box in the exact shape the probe prints (as parsed by json.loads)."""
    idle = (GPU / "h100x8_idle_samples.csv").read_text().splitlines(keepends=True)
    return {
        "version": ea.SURVEY_VERSION, "now": NOW, "boot_id": "6f1d0c4e-3b1a-4c55-9b8e-2a0c5e7d9f10",
        "hostname": "gpu-box", "uid": 0, "kernel": "5.15.0-105-generic", "have_timeout": True,
        "args": {"scratch": "/scratch", "durable": "/workspace", "python": "/opt/venv/bin/python",
                 "workdir": "/workspace/proj"},
        "workdir_exists": True,
        "disks": {
            "scratch": {"path": "/scratch", "bytes": df_bytes("/scratch", 1000 * 10**9, 100 * 10**9, 900 * 10**9),
                        "inodes": df_inodes("/scratch", 10**8, 10**6, 99 * 10**6),
                        "mount": findmnt("/scratch", "xfs", "/dev/nvme1n1")},
            "durable": {"path": "/workspace",
                        "bytes": df_bytes("/workspace", 500 * 10**9, 50 * 10**9, 450 * 10**9),
                        "inodes": df_inodes("/workspace", 5 * 10**7, 10**5, 5 * 10**7 - 10**5),
                        "mount": findmnt("/workspace", "ext4", "/dev/nvme0n1p1")},
        },
        "cgroup": {"fs": "cgroup2fs", "version": 2, "path": "", "memory_limits": [str(256 * GiB)],
                   "memory_current": str(2 * GiB),
                   "memory_events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0",
                   "cpu_limits": ["3200000 100000"]},
        "mem_total_kb": 2 * 1024**3, "nproc": 32,
        "durable_write": {"path": "/workspace/.rgt-probe-77-1234", "written": True, "read_back": True,
                          "removed": True, "error": ""},
        "same_fs": [{"staging": "/workspace/proj/export/.partial", "final": "/workspace/proj/export",
                     "staging_at": "/workspace/proj", "final_at": "/workspace/proj", "staging_dev": 66305,
                     "final_dev": 66305, "staging_mount": findmnt("/workspace", "ext4", "/dev/nvme0n1p1"),
                     "final_mount": findmnt("/workspace", "ext4", "/dev/nvme0n1p1")}],
        "nvidia_smi": "/usr/bin/nvidia-smi",
        "gpus": {"rc": 0, "out": (GPU / "h100x8_inventory.csv").read_text()},
        "gpu_samples": {"fields": ",".join(gh.SAMPLE_FIELDS), "throttle_field": gh.THROTTLE_FIELDS[0],
                        "samples": [{"rc": 0, "out": "".join(idle[i * 8:(i + 1) * 8])} for i in range(5)]},
        "compute_apps": {"rc": 0, "out": ""},
        "device_holders": {"tool": "fuser", "pids": []},
        "kernel_log": {"source": "dmesg", "rc": 0, "lines": 1812, "xid": ""},
        "torch": torch_out(),
        "caches": [],
        "proxy": {"set": [], "no_proxy": "", "NO_PROXY": ""},
        "budget_s": 110, "elapsed_s": 14,
        "client_sent_at": NOW - 0.4, "client_received_at": NOW + 14.2,
    }


H100X8 = ea.RunRequirements(gpus=8, gpu_name="H100", gpu_memory_mib=80_000)


def row(facts: dict[str, Any], number: int, req: ea.RunRequirements = H100X8) -> ea.AuditRow:
    rows = ea.audit_environment(facts, req)
    assert [r.id for r in rows] == list(range(1, 18))
    return rows[number - 1]


def test_a_healthy_box_passes_every_row_it_can_judge() -> None:
    rows = ea.audit_environment(healthy(), H100X8)
    assert {r.id: r.status for r in rows if r.status != ea.PASS} == {3: "skipped", 4: "skipped", 12: "skipped",
                                                                     14: "skipped", 15: "skipped"}
    assert ea.worst(rows) == ea.PASS


def test_wrong_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        ea.audit_environment({**healthy(), "version": "rgt-env-probe/0"}, H100X8)


def _with_disk(role: str, kind: str, value: dict[str, Any]) -> dict[str, Any]:
    facts = healthy()
    facts["disks"][role][kind] = value
    return facts


@pytest.mark.parametrize("used, status", [(849, ea.PASS), (850, ea.WARN), (949, ea.WARN), (950, ea.FAIL),
                                          (1000, ea.FAIL)])
def test_row1_bytes_boundaries(used: int, status: str) -> None:
    g = 10**9
    facts = _with_disk("durable", "bytes", df_bytes("/workspace", 1000 * g, used * g, (1000 - used) * g))
    assert row(facts, 1).status == status


def test_row1_counts_reserved_blocks_as_full_like_df() -> None:
    # 900 used + 50 avail of 1000 (GB): df says 95% (the 50 reserved for root are not available)
    g = 10**9
    facts = _with_disk("scratch", "bytes", df_bytes("/scratch", 1000 * g, 900 * g, 50 * g))
    assert row(facts, 1).status == ea.WARN and "94.7% used" in row(facts, 1).detail
    facts = _with_disk("scratch", "bytes", df_bytes("/scratch", 1000 * g, 903 * g, 47 * g))
    assert row(facts, 1).status == ea.FAIL


@pytest.mark.parametrize(("free", "status"), [(2 * 1024**3 - 1, ea.WARN), (2 * 1024**3, ea.PASS)])
def test_row1_warns_of_a_half_empty_disk_with_little_free(free: int, status: str) -> None:
    """A 4 GiB disk half empty is 50 % used and passed by percent alone; under 2 GiB free it is said (row 3
    fails what the declared checkpoints cannot fit)."""
    facts = _with_disk("durable", "bytes", df_bytes("/workspace", 2 * free, free, free))
    assert row(facts, 1).status == status
    assert ("(under 2.0 GiB)" in row(facts, 1).detail) == (status == ea.WARN)


@pytest.mark.parametrize(("checkpoint", "status"), [(10 * 10**9, ea.PASS), (40 * 10**9, ea.WARN),
                                                    (60 * 10**9, ea.FAIL)])
def test_row3_weighs_best_and_the_resume_anchor_against_the_durable_disk(checkpoint: int, status: str) -> None:
    """runs.<id>.checkpoint_bytes × 2 (best + the resume anchor, kept_checkpoints(1, 0)) + the 2 GiB reserve
    against 100 GB free: 22 GB passes, 82 GB is over 80 % of it, 122 GB does not fit."""
    g = 10**9
    facts = _with_disk("durable", "bytes", df_bytes("/workspace", 200 * g, 100 * g, 100 * g))
    req = ea.RunRequirements(ckpt_bytes=checkpoint, kept=ea.kept_checkpoints(1, 0))
    budget = {r.id: r for r in ea.audit_environment(facts, req)}[3]
    assert budget.status == status, budget


def test_row1_fails_when_df_fails() -> None:
    facts = _with_disk("durable", "bytes", {"rc": 1, "out": "Mounted on 1B-blocks Used Avail Use%\n"
                                                            "df: /workspace: No such file or directory\n"})
    result = row(facts, 1)
    assert result.status == ea.FAIL and "df: /workspace: No such file or directory" in result.detail


@pytest.mark.parametrize("used, status", [(849, ea.PASS), (850, ea.WARN), (949, ea.WARN), (950, ea.FAIL)])
def test_row2_inode_boundaries(used: int, status: str) -> None:
    facts = _with_disk("scratch", "inodes", df_inodes("/scratch", 1000, used, 1000 - used))
    assert row(facts, 2).status == status


def test_row2_inodes_not_reported_warn() -> None:
    facts = _with_disk("durable", "inodes", df_inodes("/workspace", None, None, None))
    result = row(facts, 2)
    assert result.status == ea.WARN and "not reported" in result.detail


AVAIL = 100 * GiB


def _budget(ckpt: int, kept: int = 1) -> ea.AuditRow:
    facts = _with_disk("durable", "bytes", df_bytes("/workspace", 2 * AVAIL, AVAIL, AVAIL))
    return row(facts, 3, ea.RunRequirements(gpus=8, ckpt_bytes=ckpt, kept=kept))


def test_row3_checkpoint_budget_boundaries() -> None:
    reserve = ea.SCRATCH_RESERVE_BYTES
    pass_edge = int(0.8 * AVAIL) - reserve
    assert _budget(pass_edge).status == ea.PASS
    assert _budget(pass_edge + 1).status == ea.WARN
    assert _budget(AVAIL - reserve).status == ea.WARN
    assert _budget(AVAIL - reserve + 1).status == ea.FAIL
    assert row(healthy(), 3).status == ea.SKIPPED


def test_row3_counts_kept_checkpoints_and_scratch() -> None:
    facts = _with_disk("durable", "bytes", df_bytes("/workspace", 2 * AVAIL, AVAIL, AVAIL))
    req = ea.RunRequirements(ckpt_bytes=10 * GiB, kept=ea.kept_checkpoints(2, top_k=5), data_cache_bytes=GiB,
                             log_bytes=GiB)
    assert ea.kept_checkpoints(2, top_k=5) == 10
    result = row(facts, 3, req)  # 10 × 10 GiB + 1 + 1 + 2 GiB = 104 GiB > 100 GiB
    assert result.status == ea.FAIL and "× 10" in result.detail
    assert ea.kept_checkpoints(2, top_k=1, pruning=False, queued_cells=6) == 18
    assert ea.kept_checkpoints(3, top_k=0) == 6


@pytest.mark.parametrize("files, status", [(799, ea.PASS), (800, ea.WARN), (999, ea.WARN), (1000, ea.FAIL)])
def test_row4_export_inode_boundaries(files: int, status: str) -> None:
    facts = _with_disk("durable", "inodes", df_inodes("/workspace", 2000, 1000, 1000))
    assert row(facts, 4, ea.RunRequirements(export_files=files)).status == status


def test_row4_file_count_formula() -> None:
    assert ea.export_file_count(3, [(250, 2, 2), (40, 1, 3)]) == 3 + 100 * 2 * 2 + 40 * 1 * 3
    assert row(healthy(), 4).status == ea.SKIPPED


def _memory(limits: list[str], current: int | None = None, workers: int | None = None,
            per_worker: int | None = None, version: int = 2, events: str = "") -> ea.AuditRow:
    facts = healthy()
    facts["cgroup"].update({"version": version, "memory_limits": limits,
                            "memory_current": "" if current is None else str(current), "memory_events": events})
    return row(facts, 5, ea.RunRequirements(workers=workers, worker_ram_bytes=per_worker))


def test_row5_memory_boundaries() -> None:
    limit = 10 * GiB
    assert _memory(["max", str(limit)], current=int(0.9 * limit)).status == ea.PASS
    assert _memory(["max", str(limit)], current=int(0.9 * limit) + 1).status == ea.WARN
    assert _memory([str(limit)], workers=3, per_worker=2 * GiB).status == ea.PASS     # (3 + 1) × 2 = 8 GiB
    exact = _memory([str(limit)], workers=4, per_worker=2 * GiB)                        # (4 + 1) × 2 = 10 GiB
    assert exact.status == ea.WARN and exact.detail.endswith("= 10.0 GiB (exactly the limit: no headroom)")
    assert _memory([str(limit + 1)], workers=4, per_worker=2 * GiB).status == ea.PASS
    over = _memory([str(limit)], workers=4, per_worker=2 * GiB + 1)
    assert over.status == ea.FAIL and over.detail.endswith("exceeds the limit")


def test_row5_smallest_limit_in_the_chain_wins_and_no_limit_means_host_ram() -> None:
    assert _memory([str(64 * GiB), str(8 * GiB), "max"], workers=4, per_worker=2 * GiB).status == ea.FAIL
    v1_none = _memory(["9223372036854771712"], version=1)
    assert v1_none.status == ea.PASS and v1_none.detail.startswith("no cgroup limit; host RAM 2048.0 GiB")
    assert _memory(["max"], events="oom_kill 3").detail.endswith("oom_kill 3 so far")
    facts = healthy()
    facts["cgroup"] = {"fs": "", "version": None, "path": None, "memory_limits": [], "memory_current": "",
                       "memory_events": "", "cpu_limits": []}
    facts["mem_total_kb"] = None
    assert row(facts, 5).status == ea.WARN and "unknown" in row(facts, 5).detail


@pytest.mark.parametrize("limits, nproc, status, threads", [
    (["200000 100000"], 4, ea.PASS, 2),
    (["200000 100000"], 5, ea.WARN, 2),
    (["150000 100000"], 3, ea.PASS, 1),
    (["150000 100000"], 4, ea.WARN, 1),
    (["max 100000"], 64, ea.PASS, 64),
    (["-1 100000"], 64, ea.PASS, 64),
    (["max 100000", "400000 100000"], 16, ea.WARN, 4),
])
def test_row6_cpu_oversubscription(limits: list[str], nproc: int, status: str, threads: int) -> None:
    facts = healthy()
    facts["cgroup"]["cpu_limits"] = limits
    facts["nproc"] = nproc
    result = row(facts, 6)
    assert result.status == status and f"OMP_NUM_THREADS={threads}" in result.detail


def test_row7_gpu_constraints() -> None:
    facts = healthy()
    assert row(facts, 7).status == ea.PASS
    assert row(facts, 7, ea.RunRequirements(gpus=9)).status == ea.FAIL
    assert row(facts, 7, ea.RunRequirements(gpus=1, gpu_name="A100")).status == ea.FAIL
    assert row(facts, 7, ea.RunRequirements(gpus=1, gpu_memory_mib=81560)).status == ea.FAIL
    assert row(facts, 7, ea.RunRequirements(gpus=1, gpu_memory_mib=81559)).status == ea.PASS


@pytest.mark.parametrize("used, status", [(4077, ea.PASS), (4078, ea.WARN)])  # 5 % of 81559 MiB = 4077.95
def test_row7_memory_in_use_before_launch(used: int, status: str) -> None:
    facts = healthy()
    lines = facts["gpus"]["out"].splitlines()
    lines[2] = lines[2].replace(", 81559, 0, ", f", 81559, {used}, ")
    facts["gpus"]["out"] = "\n".join(lines) + "\n"
    assert row(facts, 7).status == status


@pytest.mark.parametrize("used, status", [(1000, ea.PASS), (1001, ea.WARN)])  # exactly 5 % is not "> 5 %"
def test_row7_memory_in_use_exact_boundary(used: int, status: str) -> None:
    facts = healthy()
    facts["gpus"]["out"] = f"0, GPU-1, NVIDIA L4, 00000000:01:00.0, 20000, {used}, 550.54.15\n"
    assert row(facts, 7, ea.RunRequirements(gpus=1)).status == status


def test_row7_no_gpu_and_broken_driver() -> None:
    facts = healthy()
    facts.update(nvidia_smi=None, gpus=None, gpu_samples=None, compute_apps=None, device_holders=None,
                 kernel_log=None)
    assert row(facts, 7, ea.RunRequirements()).detail == "no GPU (CPU run)"
    assert row(facts, 7).status == ea.FAIL
    facts = healthy()
    facts["gpus"] = {"rc": 6, "out": "No devices were found\n"}
    assert row(facts, 7, ea.RunRequirements()).status == ea.PASS and row(facts, 7).status == ea.FAIL
    facts["gpus"] = {"rc": 9, "out": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"}
    assert row(facts, 7, ea.RunRequirements()).status == ea.WARN
    assert row(facts, 7).status == ea.FAIL and "exit 9" in row(facts, 7).detail
    assert row(facts, 13).status == ea.FAIL


def test_row8_torch() -> None:
    facts = healthy()
    assert row(facts, 8).status == ea.PASS and "capability 9.0" in row(facts, 8).detail
    facts["torch"] = torch_out(count=4, capability=[[9, 0]] * 4)
    assert row(facts, 8).status == ea.FAIL
    facts["torch"] = torch_out(available=False, count=0, capability=[])
    assert row(facts, 8).status == ea.FAIL and row(facts, 8, ea.RunRequirements()).status == ea.PASS
    facts["torch"] = {"rc": 0, "out": 'RGT_TORCH={"python": "3.10.12", "error": "ModuleNotFoundError: No module '
                                      "named 'torch'\"}"}
    assert row(facts, 8, ea.RunRequirements()).status == ea.FAIL
    assert row(facts, 8, ea.RunRequirements(needs_torch=False)).status == ea.PASS
    facts["torch"] = {"rc": 127, "out": "timeout: failed to run command '/opt/venv/bin/python': No such file"}
    assert "not found (exit 127)" in row(facts, 8).detail
    facts["torch"] = {"rc": 1, "out": "Segmentation fault (core dumped)"}
    assert row(facts, 8).status == ea.FAIL and "Segmentation fault" in row(facts, 8).detail


def _cache(path: str, size: int, fs_size: int, rc: int = 0) -> dict[str, Any]:
    return {"path": path, "resolved": path, "du": {"rc": rc, "out": f"{size}\t{path}\n"},
            "df": df_bytes("/", fs_size, fs_size // 2, fs_size // 2), "mount": findmnt("/", "overlay", "overlay")}


def test_row9_hidden_caches() -> None:
    scratch = 1000 * 10**9
    facts = healthy()
    facts["caches"] = [_cache("/root/.cache/huggingface", 200 * 10**9, 10**13),
                       _cache("/root/.cache/pip", 100 * 10**9, 10**13)]
    assert row(facts, 9).status == ea.PASS  # exactly 30 % of the scratch mount
    facts["caches"][1] = _cache("/root/.cache/pip", 100 * 10**9 + 1, 10**13)
    assert row(facts, 9).status == ea.WARN and f"over 30% of /scratch ({scratch / GiB:.1f} GiB)" in row(facts, 9).detail
    facts["caches"] = [_cache("/root/.cache/pip", GiB, 5 * GiB)]
    result = row(facts, 9)
    assert result.status == ea.WARN and "capped tier" in result.detail and "never auto-deleted" in result.detail
    facts["caches"] = [_cache("/root/.cache/pip", GiB, 10**13, rc=124)]
    assert row(facts, 9).status == ea.PASS and "du incomplete" in row(facts, 9).detail


def _pair(dev_s: int | None, dev_f: int | None, target_s: str = "/workspace",
          target_f: str = "/workspace") -> dict[str, Any]:
    return {"staging": "/workspace/ckpt/.tmp", "final": "/workspace/ckpt", "staging_at": "/workspace/ckpt",
            "final_at": "/workspace/ckpt", "staging_dev": dev_s, "final_dev": dev_f,
            "staging_mount": findmnt(target_s, "ext4", "/dev/sda1"),
            "final_mount": findmnt(target_f, "ext4", "/dev/sda1")}


@pytest.mark.parametrize("pair, status, words", [
    (_pair(66305, 66305), ea.PASS, "same filesystem"),
    (_pair(66305, 2049), ea.FAIL, "different filesystems"),
    (_pair(66305, 66305, "/workspace", "/mnt/bind"), ea.FAIL, "different mounts"),
    (_pair(None, 66305), ea.WARN, "could not stat"),
])
def test_row10_same_filesystem(pair: dict[str, Any], status: str, words: str) -> None:
    facts = healthy()
    facts["same_fs"] = [pair]
    result = row(facts, 10)
    assert result.status == status and words in result.detail


def test_row10_without_pairs_is_skipped() -> None:
    facts = healthy()
    facts["same_fs"] = []
    assert row(facts, 10).status == ea.SKIPPED


@pytest.mark.parametrize("mount, write, req, status, words", [
    (findmnt("/workspace", "ext4", "/dev/sda1"), {}, ea.RunRequirements(), ea.PASS, "write/read OK"),
    (findmnt("/", "overlay", "overlay"), {}, ea.RunRequirements(), ea.FAIL, "ephemeral root"),
    (findmnt("/", "ext4", "/dev/sda1"), {}, ea.RunRequirements(), ea.PASS, "write/read OK"),
    (findmnt("/", "ext4", "/dev/sda1"), {}, ea.RunRequirements(root_is_ephemeral=True), ea.FAIL, "ephemeral"),
    (findmnt("/root", "ext4", "/dev/sda1"), {}, ea.RunRequirements(expected_durable_mount="/root/autodl-fs"),
     ea.FAIL, "not the expected /root/autodl-fs"),
    (findmnt("/root/autodl-fs", "fuse.juicefs", "JuiceFS:autodl"), {},
     ea.RunRequirements(expected_durable_mount="/root/autodl-fs/"), ea.WARN, "visible late"),
    (findmnt("/workspace", "nfs4", "10.0.0.5:/vol"), {}, ea.RunRequirements(), ea.WARN, "nfs4"),
    (findmnt("/workspace", "ext4", "/dev/sda1"), {"removed": False}, ea.RunRequirements(), ea.WARN, "not removed"),
    (findmnt("/workspace", "ext4", "/dev/sda1"), {"written": False, "error": "dd: failed to open "
     "'/workspace/.rgt-probe-1-2': Read-only file system"}, ea.RunRequirements(), ea.FAIL, "Read-only file system"),
    (findmnt("/workspace", "ext4", "/dev/sda1"), {"read_back": False}, ea.RunRequirements(), ea.FAIL,
     "read back differs"),
])
def test_row11_durable_mount(mount: dict[str, Any], write: dict[str, Any], req: ea.RunRequirements,
                             status: str, words: str) -> None:
    facts = healthy()
    facts["disks"]["durable"]["mount"] = mount
    facts["durable_write"].update(write)
    result = row(facts, 11, req)
    assert result.status == status and words in result.detail


def test_row12_tier() -> None:
    assert row(healthy(), 12, ea.RunRequirements(ckpt_tier_survives=True)).status == ea.PASS
    result = row(healthy(), 12, ea.RunRequirements(ckpt_tier_survives=False))
    assert result.status == ea.WARN and "only copy" in result.detail


def test_row13_gpu_health_from_the_same_facts() -> None:
    facts = healthy()
    assert row(facts, 13).status == ea.PASS and row(facts, 13).detail == "8 GPU(s) healthy"
    facts["kernel_log"]["xid"] = (GPU / "dmesg_xid79_other_device.txt").read_text()  # 9a:00 is GPU 4 here
    assert row(facts, 13).status == ea.FAIL and row(facts, 13).detail.startswith("GPU 4: Xid 79")
    facts["kernel_log"]["xid"] = "[5.1] NVRM: Xid (PCI:0000:c1:00): 79, pid=0, GPU has fallen off the bus.\n"
    assert row(facts, 13).status == ea.PASS and "ignored 1 Xid" in row(facts, 13).detail
    facts["kernel_log"]["xid"] = (GPU / "dmesg_xid48_this_gpu.txt").read_text()
    result = row(facts, 13)
    assert result.status == ea.FAIL and result.detail.startswith("GPU 0: Xid 48") and gh.FAIL_ADVICE in result.detail
    facts["kernel_log"] = {"source": "dmesg", "rc": 1, "lines": 0, "xid": ""}
    assert row(facts, 13).status == ea.WARN and "not authoritative" in row(facts, 13).detail


def _holders(apps: str, pids: list[dict[str, Any]], own: frozenset[int] = frozenset()) -> ea.AuditRow:
    facts = healthy()
    facts["compute_apps"] = {"rc": 0, "out": apps}
    facts["device_holders"] = {"tool": "fuser", "pids": pids}
    return row(facts, 14, ea.RunRequirements(gpus=8, own_pids=own))


def test_row14_hidden_vram_holders_report_only() -> None:
    pids = [{"pid": 1234, "age_s": 900, "comm": "python"},
            {"pid": 999, "age_s": 86400, "comm": "nvidia-persistenced"},
            {"pid": 4321, "age_s": 121, "comm": "python3"},
            {"pid": 5555, "age_s": 120, "comm": "python3"},
            {"pid": 7777, "age_s": 9999, "comm": "torchrun"}]
    result = _holders("1234\n", pids, own=frozenset({7777}))
    assert result.status == ea.WARN and result.detail.endswith("pid 4321 python3 (2 min)")
    assert _holders("1234\n", pids[:2]).status == ea.PASS
    assert _holders("", pids).status == ea.SKIPPED  # no pid listed in this namespace: not attributable
    facts = healthy()
    facts["device_holders"] = {"tool": "none", "pids": []}
    facts["compute_apps"] = {"rc": 0, "out": "1234\n"}
    assert row(facts, 14).status == ea.SKIPPED


def test_row15_unprobeable_clocks() -> None:
    assert row(healthy(), 15).status == ea.SKIPPED
    answered = ea.RunRequirements(unprobeable_clocks={"idle auto-stop": "off", "auto-shutdown": "12 h"})
    assert row(healthy(), 15, answered).status == ea.PASS
    partly = ea.RunRequirements(unprobeable_clocks={"idle auto-stop": None, "auto-shutdown": "12 h"})
    assert row(healthy(), 15, partly).status == ea.WARN and "idle auto-stop" in row(healthy(), 15, partly).detail


@pytest.mark.parametrize("now, status, skew", [
    (NOW, ea.PASS, "+0"), (NOW + 14.2 + 60, ea.PASS, "+60"), (NOW + 14.2 + 61, ea.WARN, "+61"),
    (NOW - 0.4 - 1 - 60, ea.PASS, "-60"), (NOW - 0.4 - 1 - 61, ea.WARN, "-61"),
])
def test_row16_clock_skew_boundaries(now: float, status: str, skew: str) -> None:
    facts = healthy()
    facts["now"] = int(now) if float(now).is_integer() else now
    facts["client_sent_at"], facts["client_received_at"] = NOW - 0.4, NOW + 14.2
    if not float(now).is_integer():  # the box reports whole seconds; shift the window instead
        shift = now - math.floor(now)
        facts["now"] = math.floor(now)
        facts["client_sent_at"] -= shift
        facts["client_received_at"] -= shift
    result = row(facts, 16)
    assert result.status == status and f"clock skew {skew} s" in result.detail


def test_row16_without_boot_id_warns() -> None:
    facts = healthy()
    facts["boot_id"] = ""
    assert row(facts, 16).status == ea.WARN
    del facts["client_sent_at"]
    facts["boot_id"] = "x"
    assert row(facts, 16).detail == "boot_id x, clock skew not measured"
