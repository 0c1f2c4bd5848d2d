"""Was the job preempted? (docs/remote-ops.md §10): a pure refinement of one liveness answer.

Why it matters: a preempted job on a box that still bills can be relaunched there (with the user's
auto_resume), while any other death needs a person to read the log. The evidence, strongest first: the
scheduler's own PREEMPTED state (Slurm, mapped to the detail "preempted" by providers/slurm/commands.py); a
provider state or status message that says preempted, interrupted or outbid; and the §10 signal, exit 143 (SIGTERM
the app did not send) on an interruptible box. A running or finished job is never called preempted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from remote_gpu_trainer.audits.liveness import Liveness

PREEMPTED = "preempted"
PREEMPT_WORDS = ("preempt", "interrupt", "outbid")
SIGTERM_EXIT = 143
SIGNAL_EXITS = (None, 137, SIGTERM_EXIT)  # a job killed from outside: no exit code, SIGKILL's or SIGTERM's
TAKEN_STATES = ("stopped", "terminated")  # what a provider says of an interruptible box it reclaimed


def provider_words(detail: Mapping[str, Any]) -> tuple[str, ...]:
    """The words an instance status carries from its API: the raw state and the API's string fields."""
    api = detail.get("api")
    fields = api.values() if isinstance(api, Mapping) else ()
    return tuple(str(value) for value in (detail.get("raw_state"), *fields) if isinstance(value, str) and value)


def interruptible_status(detail: Mapping[str, Any]) -> bool:
    """The API says the instance is interruptible (RunPod's `interruptible`)."""
    api = detail.get("api")
    return bool(isinstance(api, Mapping) and api.get("interruptible") is True)


def preempted_word(words: Iterable[str]) -> str | None:
    return next((word for word in words if any(mark in word.lower() for mark in PREEMPT_WORDS)), None)


def refine(liveness: Liveness, *, exit_code: int | None = None, interruptible: bool = False,
           words: Iterable[str] = (), taken: str | None = None) -> Liveness:
    """`liveness` with the detail `preempted: <evidence>` when the evidence says so, else unchanged. `taken`: the
    provider's state (stopped, terminated) of an interruptible box that rgt did not put down; it counts for a job
    that cannot be read (the box is away) or that was killed from outside, never for one that exited on its own."""
    if liveness.state not in ("dead", "unknown") or is_preempted(liveness):
        return liveness
    word = preempted_word(words)
    if word is not None:
        return Liveness(liveness.state, f"{PREEMPTED}: the provider says {word!r}")
    if taken is not None and (liveness.state == "unknown" or exit_code in SIGNAL_EXITS):
        return Liveness(liveness.state, f"{PREEMPTED}: the provider says {taken} of this interruptible box, and "
                                        "rgt did not put it down")
    if liveness.state == "dead" and exit_code == SIGTERM_EXIT and interruptible:
        return Liveness("dead", f"{PREEMPTED}: exit 143 (SIGTERM) on an interruptible box")
    return liveness


def is_preempted(liveness: Liveness) -> bool:
    return liveness.state in ("dead", "unknown") and liveness.detail.startswith(PREEMPTED)
