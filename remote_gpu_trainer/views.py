"""The view dataclasses every face renders: the dashboard's panels and modals, the CLI and `--report`.

A view is data only: no I/O, no services, no Textual. The services build them (services/overview.py
for the dashboard and the report, services/teardown.py for the teardown plan); the widgets and the
report only lay them out, so a number shown in one face is the number shown in every other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # in Overview's annotation only: a project with no request never loads it (docs/architecture.md §5)
    from remote_gpu_trainer.request_views import RequestView

SEVERITY_ORDER = {"critical": 0, "error": 1, "warn": 2, "info": 3}


@dataclass(frozen=True)
class InstanceView:
    """One box as every face shows it: its state, price, meter and gate, and what to do next."""

    name: str
    provider: str
    id: str
    state: str
    gpu: str
    price_per_hour: float | None
    price_source: str
    billing: str
    cost_so_far: float
    burn_per_hour: float
    estimate: bool
    verified_month: str
    stale: bool
    currency: str = "USD"
    since_finished: float = 0.0
    note: str = ""  # why the state is what it is, e.g. the transport error behind `unknown`
    eta_s: float | None = None  # the longest ETA of the runs training on it
    drift: str = ""  # the API bills another price than the quoted one (meter PriceDrift text)
    facts_age: str = ""  # the profile's billing facts: oldest verified month, its age, unstamped count
    cost_to_finish: float | None = None  # ETA × burn rate
    # the box's teardown gate (docs/gate.md §7.2), the one the plan and `rgt down` decide: None where the box
    # has no gated action or was not asked; the runs at risk by the names `--accept-loss` takes
    gate_open: bool | None = None
    gate_reasons: tuple[str, ...] = ()
    at_risk: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckpointView:
    """One checkpoint of a run as pulled and verified: its size, hash, status and what loading it found."""

    path: str
    bytes: int | None
    sha256: str | None
    status: str
    detail: str


@dataclass(frozen=True)
class CadenceView:
    """The Young/Daly checkpoint interval of a run on a box that can be preempted (docs/remote-ops.md §10)."""

    interval_s: float  # W = sqrt(2 · μ · C)
    write_s: float  # C, one checkpoint's write time
    write_source: str  # "log" | "file times"
    mtbp_s: float  # μ, the mean time between preemptions
    mtbp_source: str  # where μ came from (rgt.toml key or profile)
    iterations: int | None = None  # W in iterations, rounded down; None when s/iteration is unknown
    s_per_iteration: float | None = None
    newest_age_s: float | None = None  # the newest checkpoint's age
    overdue: bool = False  # newest_age_s > 2 × W (S94)


@dataclass(frozen=True)
class RecoveryView:
    """A run with `recover` limits (docs/remote-ops.md §10.1): whether a person's approval stands, the restarts and
    spending used against their limits, and the newest checkpoint's age on the box."""

    approved: bool
    why_not: str  # "" while the approval stands
    restarts_used: int
    max_restarts: int
    spent: float
    max_spend: float
    currency: str
    until: str  # ISO-8601 with its offset
    checkpoint_age_s: float | None = None  # the newest checkpoint under remote_root, by the box's clock
    last: str = ""  # the latest recovery event, in words
    home: str = ""  # the stalest cell's checkpoint kept home (cell/path: what recovery would resume that cell from)
    home_age_s: float | None = None  # how long ago the run wrote it (None: nothing kept home yet)
    home_every_s: float | None = None  # how often the box is asked for newer ones (the Young/Daly cadence W)
    home_cells: int = 0  # cells with a copy kept home, of `cells`
    cells: int = 0
    preempted_seen: str = ""  # what a watcher saw the provider say of this launch's box ("" if no preemption seen)


@dataclass(frozen=True)
class LocationDriftView:
    """A location key rgt.toml now sets otherwise than the run's latest launch did (docs/gate.md §7,
    "Launch-time bindings"): the run stays where its launch put it; the edit applies to the next launch."""

    key: str
    launched: str | tuple[str, ...] | None
    now: str | tuple[str, ...] | None


@dataclass(frozen=True)
class GateView:
    """The teardown gate's answer for one box: open or not, what the action destroys, and every reason."""

    open: bool
    action: str
    destroys: tuple[str, ...]
    reasons: tuple[str, ...]
    evidence_ok: bool = False  # G1-G5 hold: the local copy is verified, whatever the profile can tear down


@dataclass(frozen=True)
class ActionView:
    """A box action (terminate, stop) as every face offers it: the button, the key binding, the command
    palette and the modal all read these fields, decided once in services.actions (and, at action time,
    by the teardown plan that carries the same fields)."""

    action_id: str
    label: str
    offered: bool  # a control is shown at all: writable session, the box not gone, the profile has it
    enabled: bool
    irreversible: bool
    reasons: tuple[str, ...] = ()  # why it is not enabled; empty when it is
    # closed only because runs' results are not home: a person may give them up by name in the modal
    # (docs/gate.md §7.2), so the control opens the modal rather than refusing outright
    at_risk: tuple[str, ...] = ()

    @property
    def waivable(self) -> bool:
        return self.offered and not self.enabled and bool(self.at_risk)

    @property
    def why_not(self) -> str:
        """The reasons in one line, for a tooltip, a palette entry or a toast."""
        shown = "; ".join(self.reasons[:3])
        return shown + (" …" if len(self.reasons) > 3 else "")


NO_ACTION = ActionView("terminate", "Terminate", offered=False, enabled=False, irreversible=True,
                       reasons=("no run selected",))


@dataclass(frozen=True)
class FindingView:
    """One finding (an audit check, a checklist item or a log signature) as the report and panels list it."""

    id: str
    check: str
    severity: str
    status: str
    message: str
    fix: str = ""  # the signature's suggested fix (log findings)
    count: int = 1  # how often it fired
    evidence: str = ""  # the line (or the rule's numbers) that fired it


@dataclass(frozen=True)
class ChecklistItem:
    """One row of the run's checklist: an automatic check's result or an item a person ticks."""

    id: str
    kind: str  # auto | tick
    title: str
    status: str  # auto: pass | findings | skipped; tick: open | ticked | not_applicable
    note: str


@dataclass(frozen=True)
class AuditRow:
    """One row of the docs/remote-ops.md §4 table: `id` is the table's row number, `check` a stable slug."""

    id: int
    check: str
    status: str  # pass | warn | fail | skipped
    detail: str


@dataclass(frozen=True)
class ChecklistRow:
    """One row of the checklist panel: a log finding, a checklist item or an environment row, with the key
    the dashboard's actions look it up by and the full text shown under the table when it is highlighted."""

    key: str
    status: str  # the word its badge shows
    label: str
    note: str
    describe: str


@dataclass(frozen=True)
class RunView:
    """One run as every face shows it: its box, evidence state, liveness, progress, findings and gate."""

    id: str
    instance: str
    evidence_state: str
    liveness: str
    liveness_detail: str
    checkpoints: tuple[CheckpointView, ...]
    gate: GateView
    findings: tuple[FindingView, ...]
    checklist: tuple[ChecklistItem, ...]
    log: str
    metric: str | None = None
    environment: tuple[AuditRow, ...] = ()  # the last phase-0 audit of the run's instance
    step: int | None = None  # the training step parsed from the log
    total_steps: int | None = None
    eta_s: float | None = None  # seconds to the end of training at the current step rate
    teardown: ActionView = NO_ACTION  # the instance's terminate control
    stop: ActionView = dataclasses.replace(NO_ACTION, action_id="stop", label="Stop", irreversible=False)
    other_notes: tuple[str, ...] = ()  # why other boxes read unknown, shown under the instances table
    checklist_rows: tuple[ChecklistRow, ...] = ()  # the checklist panel's rows (services/audit/checklist.py)
    sentinel: str = ""  # the on-box sentinel: alive, silent since T, exited after E; "" when notifications are off
    checkpoint_cadence: CadenceView | None = None  # Young/Daly W; None when the box is not preemptible or C unknown
    location_drift: tuple[LocationDriftView, ...] = ()  # location keys edited in rgt.toml since the launch
    recovery: RecoveryView | None = None  # runs.<id>.recover: what recovery may still do, and did

    def sorted_findings(self) -> list[FindingView]:
        """Worst first, then by id (docs/ux.md §8): the same order in every report format and in the TUI."""
        return sorted(self.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.id))

    def finding(self, finding_id: str | None) -> FindingView | None:
        return next((f for f in self.findings if f.id == finding_id), None)


@dataclass(frozen=True)
class CheckView:
    """One VERIFY check's latest answer (docs/verify.md §2): pass, findings or skipped, with its note."""

    id: str
    name: str
    kind: str  # auto | probe
    status: str  # pass | findings | skipped | not_run
    note: str
    findings: int = 0  # open or acknowledged records of this check
    title: str = ""  # what the check asks, in words (assets/catalogue.toml)
    runs: tuple[str, ...] = ()  # the runs it judged a subject of ("*": a project-wide subject)


@dataclass(frozen=True)
class AuditFindingView:
    """A VERIFY finding record as every face shows it (the FINDING/v1 record of docs/verify.md §3)."""

    id: str
    check: str
    check_name: str
    subject: str
    severity: str
    status: str
    message: str
    disclosure: str
    note: str
    fix: str
    values: dict[str, object]
    evidence: tuple[tuple[str, str | None], ...]  # (path, sha256)
    claims: tuple[str, ...]
    integrity_class: str
    kind: str
    scope: str
    fingerprint: str
    first_seen: datetime
    last_seen: datetime
    status_changed_at: datetime
    status_by: str
    reopened_reason: str | None = None
    runs: tuple[str, ...] = ()  # the runs it is about ("*": every run), audits/catalogue/attribution.py


@dataclass(frozen=True)
class AuditView:
    """The latest VERIFY audit: when it ran, each check's answer, every finding record, and whether an input it
    reads changed since (then the answers are older than the files)."""

    audited_at: datetime | None
    checks: tuple[CheckView, ...]
    findings: tuple[AuditFindingView, ...]
    stale: bool = False
    caption: str = ""  # when it ran, in words, as the checklist panel's border says it
    waiting: tuple[tuple[str, str], ...] = ()  # (run, why it had no data yet) at that audit

    def sorted_findings(self) -> list[AuditFindingView]:
        """Open first, then worst first, then by id."""
        return sorted(self.findings, key=lambda f: (f.status not in ("open",), SEVERITY_ORDER.get(f.severity, 9),
                                                    f.id))

    def finding(self, finding_id: str | None) -> AuditFindingView | None:
        return next((f for f in self.findings if f.id == finding_id), None)


NO_AUDIT = AuditView(None, (), ())


# -- results first in the report (docs/deliver.md §8) ----------------------------------------------------------
ARROWS = {"higher_is_better": "↑", "lower_is_better": "↓"}


@dataclass(frozen=True)
class ResultRowView:
    """One metric of one test of a run, over the run's cells (one per seed): mean ± sample std with the seed
    count and the test's n, and the best and last value of its training curve (docs/deliver.md §8)."""

    test_id: str
    split: str | None  # the split metrics.json names (None when the cells disagree: see note)
    metric: str
    direction: str | None  # higher_is_better | lower_is_better; None when unknown
    unit: str | None
    mean: float
    std: float | None  # sample standard deviation over the seeds (ddof 1); None for one seed
    seeds: int  # cells with a finite value
    n: int | None  # items per test, when every cell says the same
    cells: tuple[str, ...]  # <run>/<cell> of the values, in cell order
    curve: str | None = None  # the train.csv column best and last come from: val/<metric>, or loss
    best: float | None = None  # mean over the cells of each cell's best value of `curve`
    last: float | None = None  # mean over the cells of each cell's last value of `curve`
    note: str = ""  # what qualifies the row (a legacy cell, cells that disagree on n or split)
    sources: tuple[str, ...] = ()  # project-relative files the values were read from, once each, in cell order
    source: str = ""  # their formats: capsule, legacy, trainer_state, lightning, tensorboard, mlflow, wandb

    @property
    def arrow(self) -> str:
        return ARROWS.get(self.direction or "", "?")


@dataclass(frozen=True)
class RunResultsView:
    """A run's results, time and money: what the report opens with (docs/deliver.md §8)."""

    id: str
    rows: tuple[ResultRowView, ...]  # empty: no results yet
    cells: int = 0  # capsules found under runs/<id>/
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_s: float | None = None
    wall_source: str | None = None  # capsules | launch | running (launch to now)
    cost: float | None = None  # the instance's cost over the run's window, its share where runs overlap
    currency: str = "USD"
    cost_estimate: bool = False  # part of the window was billed at an assumed rate, or a price is unknown
    cost_note: str = ""  # why there is no cost, what is shared, or that the run is still running
    shared_with: tuple[str, ...] = ()
    trackers: tuple[str, ...] = ()  # provenance.tracker.url of the cells (http and https only)
    left_out: tuple[str, ...] = ()  # "<cell> failed (exit N)" / "<cell> never started": not in the numbers


@dataclass(frozen=True)
class ResultsView:
    """The report's first section: every run's results, then the evidence's claims with their disclosures."""

    runs: tuple[RunResultsView, ...] = ()
    claims: tuple[ClaimView, ...] = ()
    evidence_note: str = ""  # why no claims are shown: no EVIDENCE.json, or it does not parse


NO_RESULTS = ResultsView()


@dataclass(frozen=True)
class Overview:
    """Everything the dashboard and `rgt --report` show, built by services/overview.py from one look at the boxes."""

    project: str
    generated_at: datetime
    currency: str
    total: float
    burn_per_hour: float
    instances: tuple[InstanceView, ...]
    runs: tuple[RunView, ...]
    read_only: bool = False
    alerts: tuple[str, ...] = field(default_factory=tuple)
    audit: AuditView = NO_AUDIT  # the latest audit of the project by the catalogue
    results: ResultsView = NO_RESULTS  # filled for `--report` only (services/deliver/results.py)
    requests: tuple[RequestView, ...] = ()  # the approval inbox: open requests, then the latest decided ones

    @property
    def pending_requests(self) -> int:
        """How many of an agent's requests wait for a person (the dashboard's header says so)."""
        return sum(1 for r in self.requests if r.state == "pending")

    def run(self, run_id: str) -> RunView | None:
        return next((r for r in self.runs if r.id == run_id), None)

    def instance(self, name: str) -> InstanceView | None:
        return next((i for i in self.instances if i.name == name), None)


class LogLineView(NamedTuple):
    """A line as the log view shows it: its number in the file and the worst signature it raised. A named
    tuple, not a dataclass: one is made per line read, a tuple is built in C, and a tuple of an int and
    strings leaves the garbage collector's watch at its first collection (docs/architecture.md §5)."""

    line_no: int
    text: str
    level: str | None = None


@dataclass(frozen=True)
class LossAtRisk:
    """A run whose results may be on the box and are not known to be home: its reasons keep the gate closed
    until they are, or until the user types its `name` to accept losing them (docs/gate.md §7.2)."""

    name: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class TeardownPlan:
    """What a teardown would do to one box, shown for a person to confirm before anything is destroyed."""

    instance: str
    provider_id: str
    action_id: str
    action_label: str
    runs: tuple[str, ...]
    gated: bool  # irreversible or destroying: the full gate and the typed id; otherwise a plain confirmation
    gate_open: bool
    reasons: tuple[str, ...]
    lines: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # e.g. the box did not answer, so its manifest was not re-read
    irreversible: bool = True  # what the modal's title says; from the profile's action
    at_risk: tuple[LossAtRisk, ...] = ()  # the runs whose reasons a typed name waives (--accept-loss)
    accepted: tuple[str, ...] = ()  # the names the user typed: their runs' results are given up
    fixed: tuple[str, ...] = ()  # reasons no name waives (no action, the instance's state)

    @property
    def enabled(self) -> bool:
        """The one answer the modal's confirm button, Enter and the service's own refusal agree on."""
        return self.gate_open

    @property
    def why_not(self) -> str:
        return "; ".join(self.reasons[:2])

    def accepting(self, names: tuple[str, ...]) -> TeardownPlan:
        """The plan once the user typed `names` (the runs whose results they accept to lose): their reasons
        drop out; every other reason stays. A name that is not at risk waives nothing."""
        reasons = (*self.fixed, *(r for loss in self.at_risk if loss.name not in names for r in loss.reasons))
        return replace(self, accepted=tuple(n for n in names if n in self.loss_names), reasons=reasons,
                       gate_open=not reasons)

    @property
    def loss_names(self) -> tuple[str, ...]:
        return tuple(loss.name for loss in self.at_risk)


# -- DELIVER (docs/deliver.md §9): the Deliver panel and `rgt build` ------------------------------------------
@dataclass(frozen=True)
class ClaimView:
    """A claim of EVIDENCE.json as the Deliver panel shows it: its ladder state and each number inline with its
    disclosure (docs/deliver.md §5), as `rgt build evidence` last wrote them."""

    id: str
    statement: str
    state: str  # the claim ladder (planned … paper_supported), or not_built before `rgt build evidence`
    numbers: tuple[str, ...]  # one inline form per evidence row
    disclosure: str
    findings: tuple[str, ...] = ()
    # per number, D1…D8 with each item's text (None: nothing to disclose), as `rgt build evidence` stored them
    items: tuple[tuple[tuple[str, str | None], ...], ...] = ()

    def item_lines(self) -> tuple[str | None, ...]:
        """One line per number: the D-items that disclose something, or that nothing does; None for a number
        whose items were never recorded (not built, or built before rgt recorded them)."""
        lines: list[str | None] = []
        for items in self.items:
            said = [f"{code} {text}" for code, text in items if text]
            lines.append(("D1–D8: " + ("; ".join(said) if said else "nothing to disclose")) if items else None)
        return tuple(lines)


@dataclass(frozen=True)
class OutputView:
    """A figure or table folder: its QA as recorded at its last build and whether that build is still current
    (every input and output still hashes to what figure.json / table.json recorded)."""

    kind: str  # figure | table
    id: str
    built: bool
    qa_passed: bool
    failed_checks: tuple[str, ...]  # "G3_clipped fail", one per check not pass or disclosed
    stale: tuple[str, ...]  # why it is not current; empty when current
    disclosure: str = ""
    image: str | None = None  # absolute path of final.png (figures), to open it
    open_command: str = ""  # the command that opens `image` outside the terminal

    @property
    def status(self) -> str:
        """One word for the badge: not_built, stale (rebuild), qa_failed, or current."""
        if not self.built:
            return "not_built"
        if self.stale:
            return "stale"
        return "current" if self.qa_passed else "qa_failed"


@dataclass(frozen=True)
class DriftView:
    """One drift of reconcile.json: a number in a document that is not the evidence's (docs/deliver.md §6)."""

    doc: str
    line: int
    col: int
    claims: tuple[str, ...]
    metric: str
    reported: str  # the number as the document writes it
    expected: str  # the evidence's value at the decimals the document wrote
    context: str


@dataclass(frozen=True)
class DeliverRow:
    """One row of the Deliver panel, with the key its actions look it up by (claim:ID, figure:ID, table:ID,
    drift:N) and the full text shown under the table when it is highlighted."""

    key: str
    status: str
    label: str
    detail: str
    describe: str


@dataclass(frozen=True)
class DeliverView:
    """What DELIVER has made of the project: claims, figures, tables, the last reconcile, and anything that
    could not be read (one line each, never a crash)."""

    claims: tuple[ClaimView, ...]
    figures: tuple[OutputView, ...]
    tables: tuple[OutputView, ...]
    drifts: tuple[DriftView, ...]
    reconcile_line: str  # the last reconcile in words, or how to run one
    problems: tuple[str, ...]
    rows: tuple[DeliverRow, ...]
    caption: str = ""

    def output(self, key: str | None) -> OutputView | None:
        """The figure or table a row key names (figure:ID / table:ID)."""
        return next((o for o in (*self.figures, *self.tables) if f"{o.kind}:{o.id}" == key), None)


@dataclass(frozen=True)
class BuildStep:
    """One item `rgt build` built (or failed to), in the order built: the line every face prints."""

    kind: str  # figure | table | evidence | macros | store (the evidence store changed during the build)
    id: str
    status: str  # passed | qa_failed | failed | bad_input | skipped
    detail: str  # the QA (checks not passed named) or the error

    @property
    def line(self) -> str:
        mark = {"passed": "✔", "qa_failed": "▲", "failed": "✖", "bad_input": "✖"}.get(self.status, "·")
        name = f"{self.kind} {self.id}" if self.id else self.kind
        return f"{mark} {name}: {self.detail}"
