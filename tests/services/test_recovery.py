"""Recovery notes (docs/remote-ops.md §9.4): `.rgt/recovery/<run-id>.md` after launch, after the finish observe()
saw, after pull and verify; exact in the parts that matter, untouched while nothing changes, never under runs/."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from remote_gpu_trainer.recovery_note import RecoveryFacts, render
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe
from remote_gpu_trainer.services.watch.recovery import note_path
from support.helpers import FIXED_NOW, INSTANCE, RUN, FixedClock, copy_command, wait_for_liveness, write_project


def section(text: str, title: str) -> list[str]:
    """The bullet lines under `## title`."""
    lines = text.split("\n")
    start = lines.index(f"## {title}") + 2
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start:end] if line]


async def test_note_follows_launch_finish_pull_and_verify(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root)
    clock = FixedClock(FIXED_NOW)
    session = open_session(str(root), clock=clock)
    box = root / ".rgt" / "sim" / INSTANCE
    ctl = f"{box}/workspace/job/.rgt/{RUN}"
    try:
        await create_instance(session, INSTANCE)
        detail = await launch_run(session, RUN)
        path = note_path(session.project, RUN)
        assert path == root / ".rgt" / "recovery" / f"{RUN}.md"
        text = path.read_text()
        assert text.startswith(f"# Recovery note: run {RUN}\n")
        assert section(text, "Where the job is") == [
            f"- instance: {INSTANCE} (sim sim-{INSTANCE})",
            f"- job: pid {detail['pid']}, started {detail['started_at']}",
            "- workdir: `/workspace/job`",
            f"- results (remote_root): `/workspace/rgt/{RUN}`",
            "- log: `/workspace/job/train.log`",
            f"- control folder: `/workspace/job/.rgt/{RUN}`",
            *[f"  - `/workspace/job/.rgt/{RUN}/{name}`"
              for name in ("pid", "pid_start", "exit_code", "DONE", "finished_at", "launch.json", "wrapper.sh")],
        ]
        assert section(text, "How it was started") == [
            f"- each cell runs: `{copy_command()}`",
            f"- rgt started the wrapper with: `cd {ctl}; setsid -f bash {ctl}/wrapper.sh </dev/null "
            f">>{ctl}/launch.log 2>&1`",
        ]
        assert section(text, "Last known state") == ["- running, seen by rgt since 2026-11-29T12:00:00Z"]
        assert f"First: `cd {root.resolve()} && rgt watch {RUN} --once` (probes the box again), then:" in text
        assert section(text, "After reconnecting")[1:] == [f"- `rgt watch {RUN}` to follow it until it ends"]

        await wait_for_liveness(session)
        clock.advance(minutes=5)
        await observe(session)
        text = path.read_text()
        assert section(text, "Last known state") == [
            "- finished (exit 0, artifacts present), seen by rgt since 2026-11-29T12:05:00Z"]
        assert section(text, "After reconnecting")[1:] == [f"- `rgt pull {RUN}`, then `rgt verify {RUN}`"]

        before = os.stat(path).st_mtime_ns, path.read_bytes()
        clock.advance(minutes=5)
        await observe(session)  # nothing changed: the file is left alone
        assert (os.stat(path).st_mtime_ns, path.read_bytes()) == before

        clock.advance(minutes=1)
        await pull_run(session, RUN)
        text = path.read_text()
        assert section(text, "Last known state")[1:] == [
            "- pulled: every file, each matching its manifest hash at 2026-11-29T12:11:00Z"]
        assert section(text, "After reconnecting")[1:] == [f"- `rgt verify {RUN}`"]

        clock.advance(minutes=1)
        await verify_run(session, RUN)
        text = path.read_text()
        assert section(text, "Last known state") == [
            "- finished (exit 0, artifacts present), seen by rgt since 2026-11-29T12:05:00Z",
            "- pulled: every file, each matching its manifest hash at 2026-11-29T12:11:00Z",
            "- verified: passed at 2026-11-29T12:12:00Z",
        ]
        assert section(text, "After reconnecting")[1:] == [
            f"- `rgt down {RUN} --confirm sim-{INSTANCE}` once you no longer need the box (the teardown gate "
            "decides)"]
        run_dir = root / "runs" / RUN
        assert run_dir.is_dir() and not [p for p in run_dir.rglob("*") if "recovery" in p.name or p.suffix == ".md"]
        assert sorted(p.name for p in (root / ".rgt" / "recovery").iterdir()) == [f"{RUN}.md", f"{RUN}.state.json"]
        assert box.is_dir()  # writing notes never stops or deletes the box
    finally:
        await session.close_transports()
        session.close()


async def test_no_note_for_a_run_never_launched(tmp_path: Path) -> None:
    write_project(tmp_path / "p")
    session = open_session(str(tmp_path / "p"))
    try:
        await create_instance(session, INSTANCE)
        await observe(session)
        assert not (tmp_path / "p" / ".rgt" / "recovery").exists()
    finally:
        await session.close_transports()
        session.close()


def test_every_command_in_the_note_pastes_as_the_words_it_names() -> None:
    """A project folder, a log or a provider id with a space, a quote or a `;` stays one shell word in every
    command the note offers: pasting it never runs a second command."""
    ctl = "/w/my job/.rgt/r1"
    facts = RecoveryFacts(
        run_id="r1", project="/home/u/my proj; touch pwned", instance="box", host="ssh gpu1",
        workdir="/w/my job", remote_root="/w/out", log="/w/my job/it's.log", ctl_dir=ctl, command="python t.py",
        handle="pid 42", state="finished", evidence=("verified: passed at 2026-11-29T12:12:00Z",),
        provider_id="pod 'a'; b")
    text = render(facts)
    commands = [shlex.split(part) for part in re.findall(r"`([^`]+)`", text)
                if part.startswith(("cd ", "kill ", "cat ", "tail ", "rgt down "))]
    assert ["cd", "/home/u/my proj; touch pwned", "&&", "rgt", "watch", "r1", "--once"] in commands
    assert ["rgt", "down", "r1", "--confirm", "pod 'a'; b"] in commands
    assert ["cat", f"{ctl}/exit_code", f"{ctl}/finished_at;", "ls", f"{ctl}/DONE"] in commands
    assert ["tail", "-n", "50", "/w/my job/it's.log"] in commands
    assert f"`kill -0 $(cat '{ctl}/pid')`" in text  # the marker path is quoted inside $(...) too
