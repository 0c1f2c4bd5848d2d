"""The host sample is text from the box: parsed strictly, a line that does not parse is dropped, never a crash
and never a guess (a hostile box prints anything)."""

from __future__ import annotations

from remote_gpu_trainer.audits.host_sample import ClaimCheck, parse_host_sample
from remote_gpu_trainer.audits.rules.signals import ComputeApp, DiskUsage, MemorySample

HEAD = "t\trss_bytes\tsys_used_bytes\tsys_avail_bytes\tcg_current_bytes\tcg_max_bytes\tcg_oom_kill\tgpu0_used_mib"


def test_a_well_formed_sample_is_read_whole() -> None:
    text = "\n".join([
        "NOW=1700000000.5", "PIDS=100 101 102", "CG_CURRENT=900", "CG_MAX=1000", "CG_OOM=2",
        "DISK=0 4194304 102400 4091904 1000 900 65", "CLAIM=0 1 1234", "CLAIM=1 0 0",
        "GPUMAP=0, GPU-aaa", "GPUMAP=1, GPU-bbb", "APP=4242, GPU-bbb, 2034", "APP=77, GPU-aaa, [N/A]",
        f"TSV_HEAD={HEAD}", "OOM_BASE=1", "TSV=1699999990.0\t5\t6\t7\t950\t1000\t1\t12",
        "TSV=1699999995.0\t5\t6\t7\t960\t\t1\t", "TSV_OFFSET=4096"])
    s = parse_host_sample(text, ["/data/rgt/r1", "/data/job"], claims=2)
    assert s is not None and s.now == 1700000000.5 and s.trainer_pids == (100, 101, 102)
    assert (s.memory, s.oom_kill, s.oom_base) == (MemorySample(1700000000.5, 900, 1000), 2, 1)
    assert s.disks == (DiskUsage("/data/rgt/r1", bytes_used_pct=100 * 4091904 / (4091904 + 102400),
                                 inodes_used_pct=10.0, free_bytes=102400),)
    assert s.claims == (ClaimCheck(True, 1234), ClaimCheck(False, 0))
    assert s.apps == (ComputeApp(4242, 1, 2034.0), ComputeApp(77, 0, None))
    assert s.tsv_memory == (MemorySample(1699999990.0, 950, 1000), MemorySample(1699999995.0, 960, None))
    assert s.tsv_offset == 4096


def test_garbage_from_a_hostile_box_is_dropped() -> None:
    text = "\n".join([
        "NOW=1700000000", "PIDS=12 x -3 99999999999999999999999", "CG_CURRENT=lots", "CG_MAX=-1", "CG_OOM=nan",
        "DISK=0 1 2", "DISK=5 1 1 1 1 1 1", "DISK=0 a b c d e f", "CLAIM=7 1 10", "CLAIM=0 2 10", "CLAIM=0 1",
        "GPU=0, garbage", "GPUMAP=zero, GPU-aaa", "APP=4242, GPU-aaa, 1",
        f"TSV_HEAD={HEAD}", "TSV=yesterday\t1\t1\t1\t1\t1\t1\t1", "TSV=1\t2", "TSV_OFFSET=-5", "\x1b[2J=1"])
    s = parse_host_sample(text, ["/data/rgt/r1"], claims=1)
    assert s is not None
    assert s.trainer_pids == (12,)
    assert (s.memory, s.oom_kill, s.disks, s.claims) == (None, None, (), (None,))
    assert (s.gpus, s.apps, s.tsv_memory, s.tsv_offset) == ((), None, (), None)


def test_no_time_is_no_sample() -> None:
    assert parse_host_sample("PIDS=1\nCG_CURRENT=5\n", [], claims=0) is None
    assert parse_host_sample("NOW=inf\n", [], claims=0) is None
