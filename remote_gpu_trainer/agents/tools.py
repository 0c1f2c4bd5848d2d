"""THE table of the agent's tools: one row per tool, its name, what it does in one line, whether it changes anything,
and its handler. The MCP server (mcp_server.py) registers exactly these rows and the skill (skill.py) describes
exactly these rows, so neither can drift from the other (tests/agents/ hold both to it).

A handler is `async (call, **arguments) -> Outcome`; its arguments' annotations are the tool's input schema. A `long`
row's work runs as a task the server keeps under (tool, the argument named by `key`): its call takes `timeout_s` and
returns early, saying so, while the work goes on; the next call with the same key waits for the same task.

The agent never gets a tool that rents, stops, terminates, resumes or decides a finding: those are the request
tools, which file a request a person approves (services/inbox/). pyproject.toml's import-linter contract keeps this
package away from the services that act (teardown, rent, resume, the inbox's decisions) and from the providers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.agents import arc_tools, project_tools, request_tools
from remote_gpu_trainer.agents.calls import Outcome

Handler = Callable[..., Awaitable[Outcome]]
SHORT_BOUND_S = 120.0  # a tool without timeout_s answers within this, or says it could not
LONG_DEFAULT_S = 120
LONG_MAX_S = 600


@dataclass(frozen=True)
class AgentTool:
    """One row of the tools table: a tool's name, its one-line summary, whether it changes anything, its handler and
    how long it may run. The MCP server and the skill are both built from these rows."""

    name: str
    summary: str  # one line: the tool's description for the agent and its line in the skill
    changes: bool  # it writes something (the box, the evidence store, the outputs, the inbox): logged with its actor
    handler: Handler
    long: bool = False  # runs as a kept task, bounded by the call's timeout_s
    key: str | None = None  # the argument naming the subject (a long tool's second call joins the first's task)
    bound_s: float = SHORT_BOUND_S  # a short tool's bound
    keeps_session: bool = False  # one Session per subject, kept between calls (what it accumulates is the answer)


TOOLS: tuple[AgentTool, ...] = (
    AgentTool("rgt_status", "Every box of this project (or of every project opened) with its state, burn per hour, "
              "cost so far and idle time, and the boxes that bill in a cloud account and no project names.",
              False, project_tools.status),
    AgentTool("rgt_report", "The whole project in one JSON document (rgt --report): results, meter, instances, runs "
              "with their evidence state, teardown gate and findings, and the VERIFY audit.",
              False, project_tools.report),
    AgentTool("rgt_events", "The append-only event log (rgt events), newest last: every approval, action, refusal, "
              "request and agent tool call with its actor.", False, project_tools.events),
    AgentTool("rgt_watch", "One look at a run (rgt watch RUN --once): liveness (running, stalled, finished, dead, "
              "preempted, unknown), its alerts, and step, total, ETA and loss when the log shows them.",
              False, arc_tools.watch, key="run", keeps_session=True),
    AgentTool("rgt_push", "Copy the run's `push` files (rgt.toml) to its box's workdir.", True, arc_tools.push,
              long=True, key="run"),
    AgentTool("rgt_run", "Launch a run on its box, as `rgt run`: the phase-0 environment audit first; a failed row "
              "refuses unless `ack` says why. The box must be up already (renting is rgt_request_rent).",
              True, arc_tools.launch, long=True, key="run"),
    AgentTool("rgt_pull", "Pull a finished run's results home, each file checked against the box's manifest hash "
              "(rgt pull); resumable.", True, arc_tools.pull, long=True, key="run"),
    AgentTool("rgt_verify", "Load-verify the pulled copy (rgt verify): hashes, checkpoint load checks, then the "
              "VERIFY audit; opens the teardown gate when it passes.", True, arc_tools.verify, long=True, key="run"),
    AgentTool("rgt_audit", "Run the VERIFY catalogue over the project or one run (rgt audit): findings are "
              "disclosed, never a failure.", True, project_tools.audit, long=True, key="run"),
    AgentTool("rgt_findings", "The VERIFY findings with each check's last answer, for the project or one run, or "
              "one finding's full record.", False, project_tools.findings),
    AgentTool("rgt_build", "DELIVER: build figures, tables, EVIDENCE.json and the LaTeX macros from the verified "
              "evidence (rgt build), each with its QA.", True, project_tools.build, long=True, key="what"),
    AgentTool("rgt_reconcile", "Check every number the documents quote against EVIDENCE.json (rgt reconcile); a "
              "drift is reported with its file and line.", True, project_tools.reconcile),
    AgentTool("rgt_completeness", "Which grid points are complete, still to pull, incomplete or unknown "
              "(rgt completeness).", True, project_tools.completeness, long=True),
    AgentTool("rgt_recovery_note", "The run's recovery note: what happened and what to do after a crash or a "
              "preemption.", False, project_tools.recovery_note),
    AgentTool("rgt_request_rent", "Ask a person to rent (or start) the run's box for `hours`; returns the request, "
              "pending (an allowance a person granted may let it through at once).",
              True, request_tools.request_rent, long=True, key="run"),
    AgentTool("rgt_request_stop", "Ask a person to stop a box; it happens only when they approve and the teardown "
              "gate allows it then.", True, request_tools.request_stop),
    AgentTool("rgt_request_teardown", "Ask a person to terminate a box; it happens only when they approve with the "
              "instance id typed and the gate is open then (results pulled and verified).",
              True, request_tools.request_teardown),
    AgentTool("rgt_request_resume", "Ask a person to relaunch a preempted run on its still-billing box "
              "(rgt run RUN --resume).", True, request_tools.request_resume, long=True, key="run"),
    AgentTool("rgt_request_recovery", "Ask a person to approve the run's recovery limits (runs.RUN.recover in "
              "rgt.toml): once approved, a watcher relaunches the run within them when it is preempted.", True,
              request_tools.request_recovery),
    AgentTool("rgt_request_finding_decision", "Ask a person to acknowledge (with a disclosure) or waive a VERIFY "
              "finding, with the note you propose.", True, request_tools.request_finding_decision),
    AgentTool("rgt_requests", "Your requests and their states (pending, executing, done, failed, refused, "
              "rejected); with wait_s, waits until one leaves pending.", False, request_tools.requests,
              bound_s=LONG_MAX_S + 60),
)


def tool(name: str) -> AgentTool:
    return next(row for row in TOOLS if row.name == name)


def describe(row: AgentTool) -> str:
    """The description the agent reads: the line, and whether it changes anything or waits for a person."""
    if row.name.startswith("rgt_request_"):
        tail = " Files a request; changes nothing until a person approves it."
    elif row.changes:
        tail = " Changes the project (logged in the event log with you as the actor)."
    else:
        tail = " Reads only."
    bound = (f" Bounded by timeout_s (default {LONG_DEFAULT_S} s, at most {LONG_MAX_S}): past it the tool returns "
             "state \"running\" and the next call waits for the same work.") if row.long else ""
    return row.summary + tail + bound


def arguments_of(row: AgentTool) -> list[tuple[str, Any]]:
    """The tool's arguments as (name, inspect.Parameter), without the call itself."""
    import inspect

    return list(inspect.signature(row.handler, eval_str=True).parameters.items())[1:]
