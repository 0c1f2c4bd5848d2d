"""The committed demo training that the demo snapshots replay (tests/fixtures/make_demo_replay.py) still says
what the demo does: made by today's train.py, rgt_capsule.py and data, and complete for every run and cell."""

from __future__ import annotations

import json
from pathlib import Path

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services.demo_project import CAPSULE_FILES, create_demo
from support.demo_replay import REPLAY_DIR, SPLIT_MANIFESTS, source_digests


def test_the_replayed_training_was_made_by_todays_demo(tmp_path: Path) -> None:
    config = create_demo(tmp_path / "demo", quick=True, flawed=True)
    committed = json.loads((REPLAY_DIR / "SOURCES.json").read_text(encoding="utf-8"))
    assert committed == source_digests(tmp_path / "demo"), \
        "the demo changed since tests/fixtures/demo_replay was made: run tests/fixtures/make_demo_replay.py"
    project = load_project(config)
    for run_id, run in project.runs.items():
        for cell in run.roster:
            missing = [name for name in CAPSULE_FILES if not (REPLAY_DIR / run_id / cell / name).is_file()]
            assert not missing, f"demo_replay/{run_id}/{cell} lacks {missing}"
            record = json.loads((REPLAY_DIR / run_id / cell / "run.json").read_text(encoding="utf-8"))
            assert (record["run_id"], record["cell"]) == (run_id, cell)
            assert f"cell {cell} complete" in (REPLAY_DIR / run_id / f"{cell}.log").read_text(encoding="utf-8")
    assert sorted(p.name for p in REPLAY_DIR.glob("*.json")) == sorted(["SOURCES.json", *SPLIT_MANIFESTS])
