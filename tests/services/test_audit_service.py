"""services/audit/audit.py: what the audit gathers (files, probe answers, pulled logs), that it runs after every
verification, and that the dashboard's re-audit happens exactly when an input changed."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path

from remote_gpu_trainer.services.audit import audit
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state.events import EventKind
from support.capsules import classification_items, write_capsule
from support.helpers import FIXED_NOW, INSTANCE, RUN, FixedClock, wait_for_liveness, write_project


def project(root: Path) -> Session:
    write_project(root)
    write_capsule(root, RUN, "seed0", metrics={"acc": 0.8}, items=classification_items(100, correct=80))
    return open_session(str(root), clock=FixedClock(FIXED_NOW))


def test_gather_carries_probe_answers_and_the_pulled_logs(tmp_path: Path) -> None:
    session = project(tmp_path / "p")
    session.db.add_probe_record("V20", f"capsule:{RUN}/seed0", {"batch": 32, "mean_cosine": 0.5, "spread": 0.4})
    (tmp_path / "p" / "runs" / RUN / "seed0" / "train.log").write_text("epoch 1\nsaved checkpoint to best.pth\n")
    evidence = audit.gather(session.project, session.db)
    assert evidence.probes[("V20", f"capsule:{RUN}/seed0")]["mean_cosine"] == 0.5
    assert evidence.log_lines[RUN] == ((1, "epoch 1"), (2, "saved checkpoint to best.pth"))
    session.close()


def test_a_re_audit_happens_only_when_an_input_changed(tmp_path: Path) -> None:
    session = project(tmp_path / "p")
    assert audit.audit_if_changed(session.project, session.db) is None, "opening a project starts no audit"
    first = audit.run_audit(session.project, session.db)
    assert any(r.check == "V04" for r in first.raised)
    assert audit.audit_if_changed(session.project, session.db) is None, "nothing changed"
    assert not audit.audit_view(session.project.root, session.db).stale
    metrics = tmp_path / "p" / "runs" / RUN / "seed0" / "test" / "main" / "metrics.json"
    stat = metrics.stat()
    os.utime(metrics, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: the inputs changed
    stale = audit.audit_view(session.project.root, session.db, FIXED_NOW + timedelta(minutes=5))
    assert stale.stale and stale.caption == "audited 5m ago · inputs changed since (u)"
    again = audit.audit_if_changed(session.project, session.db)
    assert again is not None and again.raised == ()
    assert len(session.db.events(kind=EventKind.VERIFY_AUDIT)) == 2
    session.close()


def test_every_verification_is_followed_by_an_audit(tmp_path: Path) -> None:
    write_project(tmp_path / "p")
    session = open_session(str(tmp_path / "p"), clock=FixedClock(FIXED_NOW))

    async def arc() -> None:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session)
        await verify_run(session, RUN)  # before the pull: fails, and the audit still runs
        assert session.db.last_catalogue_audit() is not None
        await pull_run(session, RUN)
        assert (await verify_run(session, RUN)).ok

    asyncio.run(arc())
    kinds = [e.kind for e in session.db.events() if e.kind in (EventKind.VERIFY, EventKind.VERIFY_AUDIT)]
    assert kinds == [EventKind.VERIFY, EventKind.VERIFY_AUDIT, EventKind.VERIFY, EventKind.VERIFY_AUDIT]
    session.close()


def test_a_negative_loss_read_from_train_csv_is_a_stored_v24_finding(tmp_path: Path) -> None:
    """The step of the bad row comes out of pandas as a numpy int64: the finding is still stored (its values are
    plain JSON), and the audit does not die (it did: int64 is not JSON serializable)."""
    write_project(tmp_path / "p")
    rows = [{"step": 10 * (i + 1), "epoch": i + 1, "loss": 1.0 / (i + 1), "lr": 0.001} for i in range(10)]
    rows[4]["loss"] = -2.0
    write_capsule(tmp_path / "p", RUN, "seed0", metrics={"acc": 0.8}, items=classification_items(100, correct=80),
                  config={"loss": "ce", "seed": 0}, train=rows)
    session = open_session(str(tmp_path / "p"), clock=FixedClock(FIXED_NOW))
    audit.run_audit(session.project, session.db)
    [record] = [r for r in session.db.finding_records() if r.check == "V24"]
    assert record.severity == "error" and record.body["values"]["loss.step"] == 50
    session.close()


def test_a_partial_audit_keeps_the_other_checks_answers(tmp_path: Path) -> None:
    session = project(tmp_path / "p")
    audit.run_audit(session.project, session.db)
    before = {c.id: c.status for c in audit.audit_view(session.project.root, session.db).checks}
    audit.run_audit(session.project, session.db, only={"V04"})
    after = {c.id: c.status for c in audit.audit_view(session.project.root, session.db).checks}
    assert after == before and "not_run" not in after.values()
    session.close()
