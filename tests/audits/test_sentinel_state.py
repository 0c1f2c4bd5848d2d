"""The on-box sentinel's own liveness (audits/liveness.sentinel_state, docs/remote-ops.md §9.1) and the liveness
look's fields it is read from."""

from __future__ import annotations

from remote_gpu_trainer.audits.liveness import LivenessLook, sentinel_state
from remote_gpu_trainer.services.watch.liveness import parse_look


def test_the_sentinels_own_liveness_in_words() -> None:
    now = 1_800_000_000.0
    assert sentinel_state(LivenessLook(now=now, sentinel_beat=now - 95.0), poll_s=30.0) == "alive"  # 3 × 30 + 5
    assert sentinel_state(LivenessLook(now=now, sentinel_beat=now - 96.0), poll_s=30.0) == \
        "silent since 2027-01-15T07:58:24Z"
    assert sentinel_state(LivenessLook(now=now, sentinel_beat=now - 500, sentinel_exit="died"), 30.0) == \
        "exited after died"
    assert sentinel_state(LivenessLook(now=now, sentinel_beat=now, sentinel_exit="x; rm -rf"), 30.0) == "alive"
    assert sentinel_state(LivenessLook(now=now), 30.0) == "not started"
    assert sentinel_state(LivenessLook(error="timeout"), 30.0) == "unknown"



def test_the_probe_reads_the_heartbeat_and_the_exit_word() -> None:
    probed = parse_look("NOW=1700000000\nPID_STATE=gone\nSENTINEL=1699999990\nSENTINEL_EXIT=finished\n")
    assert (probed.sentinel_beat, probed.sentinel_exit) == (1699999990.0, "finished")
    assert (parse_look("NOW=1\nSENTINEL=soon\n").sentinel_beat, parse_look("NOW=1\n").sentinel_exit) == (None, None)
