"""Box actions (terminate, stop) as every face offers them: offered, enabled, irreversible, and why not.

Decided once here from the profile, the session's mode, the instance's state and the gate's reasons; the
dashboard's button, key binding and command palette and the report read the ActionView this returns, and
the teardown plan (services/teardown.py) carries the same fields at action time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remote_gpu_trainer.views import ActionView

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.base import InstanceStatus
    from remote_gpu_trainer.services.session import Session


def action_view(session: Session, instance: str, status: InstanceStatus, action_id: str,
                gate_reasons: tuple[str, ...], at_risk: tuple[str, ...] = ()) -> ActionView:
    """Whether the instance's `action_id` is offered and enabled, whether it is irreversible, and why
    not: the one decision the button, the key, the palette and the modal render. A gated action
    (one that destroys data) needs the evidence gate open; a plain one only a box to act on."""
    profile = session.profile(instance)
    action = profile.action(action_id)
    if action is None:
        return ActionView(action_id, action_id.capitalize(), offered=False, enabled=False,
                          irreversible=action_id == "terminate",
                          reasons=(f"{profile.display_name} has no {action_id!r} action",))
    reasons: list[str] = []
    if session.read_only:
        reasons.append("read-only session: nothing is torn down from here")
    if action.needs_gate:
        reasons.extend(gate_reasons)
    state = status.state
    fixed = not status.actable
    if fixed and state_reason(state) not in reasons:
        reasons.append(state_reason(state))
    waivable = at_risk if action.needs_gate and reasons and not fixed and not session.read_only else ()
    return ActionView(action_id, action.label, offered=not session.read_only and state != "terminated",
                      enabled=not reasons, irreversible=not action.reversible, reasons=tuple(reasons),
                      at_risk=tuple(waivable))


def state_reason(state: str) -> str:
    """Why nothing can be done to a box whose state is terminated or unknown."""
    return f"instance state is {state}: nothing to tear down until the provider says otherwise"
