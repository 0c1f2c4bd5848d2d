"""The data every VERIFY check reads and the findings it returns (docs/verify.md §1).

A check is a pure function `check(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult`. The
inputs are parsed once (audits/catalogue/load.py for the capsule formats of docs/verify.md §5, the readers in
audits/catalogue/readers/ for what trackers write) into the dataclasses below, so a check never opens a file the
loader did not hand it and every check sees the same bytes.

Subjects name what a finding is about (docs/verify.md §3): `capsule:<run>/<cell>`, `pair:<capsule>~<control>`,
`claim:<id>`, `number:<run>/<test>/<metric>` (a number no EVIDENCE claim names), `split:<split-set-id>`,
`run:<run>`, `file:<path>`, `doc:<path>[:<line>]`, `project`; audits/catalogue/attribution.py says which runs each
is about.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

SEVERITIES = ("info", "warn", "error", "critical")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
INTEGRITY_CLASSES = ("bug", "negligence", "qrp_tell", "ffp_tell")
CHECK_STATUSES = ("pass", "findings", "skipped", "not_run")  # not_run: no data yet (attribution.py)


def canonical_json(value: Any) -> bytes:
    """The one canonical form hashes are taken over (docs/verify.md §5)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def plain(value: Any) -> Any:
    """A value as JSON holds it: mappings with string keys, lists, and Python scalars; a numpy or pandas scalar
    (an int64 step read from train.csv) becomes its Python number, anything else its string."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)  # numpy/pandas scalars: the one way to get their Python value
    if callable(item):
        try:
            return plain(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class EvidenceRef:
    """A file a finding rests on, project-relative, with the sha256 of the bytes the check read."""

    path: str
    sha256: str | None = None


@dataclass(frozen=True)
class Finding:
    """What a check found about one subject. `disclosure` is the text that rides with the claims it touches
    (empty: the message is the disclosure); `fix` says what to do about it."""

    check: str  # "V04"
    subject: str
    severity: str
    message: str
    values: Mapping[str, Any] = field(default_factory=dict)
    evidence: tuple[EvidenceRef, ...] = ()
    disclosure: str = ""
    fix: str = ""
    integrity_class: str = "bug"
    claims: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", plain(self.values))  # stored and hashed as JSON: plain values only
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"{self.check}: severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if self.integrity_class not in INTEGRITY_CLASSES:
            raise ValueError(f"{self.check}: integrity class {self.integrity_class!r} is unknown")

    @property
    def fingerprint(self) -> str:
        """sha256 of {check, subject, sorted evidence sha256s, values} (docs/verify.md §3)."""
        shas = sorted(ref.sha256 or "" for ref in self.evidence)
        body = {"check": self.check, "subject": self.subject, "evidence": shas, "values": self.values}
        return "sha256:" + sha256_hex(canonical_json(body))

    @property
    def disclosure_text(self) -> str:
        return self.disclosure or self.message


@dataclass(frozen=True)
class CheckResult:
    """One check's answer for the project. `subjects` are every subject the check judged: those without a
    finding passed (the findings lifecycle marks their records fixed). `skipped` names what was missing."""

    check: str
    name: str
    kind: str  # auto | probe
    status: str  # pass | findings | skipped | not_run
    findings: tuple[Finding, ...] = ()
    subjects: tuple[str, ...] = ()
    note: str = ""

    @property
    def passed_subjects(self) -> tuple[str, ...]:
        hit = {f.subject for f in self.findings}
        return tuple(s for s in self.subjects if s not in hit)


def result(check: str, name: str, findings: list[Finding], subjects: list[str] | tuple[str, ...], *,
           kind: str = "auto", note: str = "", keep_parts: bool = False) -> CheckResult:
    """A check that ran: `findings` when it found anything (info included), else `pass`; every subject a
    finding names counts as judged. Findings on one subject are joined (join_per_subject): the findings table
    holds one record per (check, subject); `keep_parts` keeps each joined part's values under `issues`."""
    joined = join_per_subject(findings, keep_parts=keep_parts)
    unique = tuple(dict.fromkeys(list(subjects) + [f.subject for f in joined]))
    status = "findings" if joined else "pass"
    return CheckResult(check, name, kind, status, tuple(joined), unique, note)


def join_per_subject(findings: list[Finding], *, keep_parts: bool = False) -> list[Finding]:
    """One finding per subject, in the order subjects first appear: several become one at the worst severity
    with every message, evidence file, claim and fix kept."""
    groups: dict[str, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(finding.subject, []).append(finding)
    return [group[0] if len(group) == 1 else _joined(group, keep_parts) for group in groups.values()]


def _joined(group: list[Finding], keep_parts: bool) -> Finding:
    """Values are merged; each part's own values are also kept, as `issues`, when asked or when two parts name
    the same key (a merge alone would lose one).
    The disclosure joins the parts' own disclosures (with none, the joined message discloses)."""
    ranked = sorted(group, key=lambda f: -SEVERITY_RANK[f.severity])
    top = ranked[0]
    keys = [set(f.values) for f in ranked]
    values: dict[str, Any] = {k: v for f in ranked for k, v in f.values.items()}
    if keep_parts or sum(len(k) for k in keys) != len(set().union(*keys)):
        values["issues"] = [dict(f.values) for f in ranked]
    return Finding(
        top.check, top.subject, top.severity, "; ".join(f.message for f in ranked), values=values,
        evidence=tuple(dict.fromkeys(ref for f in ranked for ref in f.evidence)),
        disclosure="; ".join(dict.fromkeys(f.disclosure for f in ranked if f.disclosure)),
        fix=" ".join(dict.fromkeys(f.fix for f in ranked if f.fix)), integrity_class=top.integrity_class,
        claims=tuple(dict.fromkeys(c for f in ranked for c in f.claims)))


def skipped(check: str, name: str, why: str, *, kind: str = "auto") -> CheckResult:
    """A check whose inputs are absent: it judged nothing, so no record changes status (docs/verify.md §1)."""
    return CheckResult(check, name, kind, "skipped", (), (), why)


@dataclass(frozen=True)
class InputProblem:
    """A file that is there but could not be read as its format says: malformed JSON or YAML, a missing
    column, NaN where a number belongs. Checks that needed it skip; V-input findings carry it."""

    path: str
    message: str


@dataclass(frozen=True)
class TestArtifacts:
    """One (capsule, test): `metrics.json` and the per-item results, as read."""

    test_id: str
    metrics_path: str  # project-relative
    metrics: Mapping[str, Any] | None  # parsed metrics.json; None when absent or unreadable
    metrics_sha256: str | None = None
    results_path: str | None = None
    results: pd.DataFrame | None = None  # one row per item (results.parquet or results.csv)
    results_sha256: str | None = None

    @property
    def split(self) -> str | None:
        value = (self.metrics or {}).get("split")
        return value if isinstance(value, str) else None

    @property
    def n(self) -> int | None:
        value = (self.metrics or {}).get("n")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @cached_property
    def split_results(self) -> pd.DataFrame | None:
        """The result rows of the split metrics.json reports (all rows when there is no `split` column). Taken
        once per audit and shared by the checks that read them (V21, V22, V23, V29): a filtered copy of the
        table each time was a good part of an audit's time. Read only, like `results`."""
        rows = self.results
        if rows is not None and "split" in rows.columns and self.split is not None:
            labels = rows["split"].unique().tolist()
            if len(labels) == 1 and str(labels[0]) == self.split:  # every row of the split: the table itself
                return rows
            rows = rows[(rows["split"].astype(str) == self.split).to_numpy(dtype=bool, na_value=False)]
        return rows

    def metric_block(self, metric: str) -> Mapping[str, Any] | None:
        blocks = (self.metrics or {}).get("metrics")
        block = blocks.get(metric) if isinstance(blocks, Mapping) else None
        return block if isinstance(block, Mapping) else None

    def metric_value(self, metric: str) -> float | None:
        block = self.metric_block(metric)
        value = block.get("value") if block is not None else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)


@dataclass(frozen=True)
class Capsule:
    """One roster cell's evidence, `runs/<run>/<cell>/` (docs/verify.md §5). `source` says which format it
    was read from (`capsule`, `legacy`, `trainer_state`, `lightning`, `tensorboard`, `mlflow`, `wandb`): a
    reader fills what its format has and leaves the rest None, and checks that need the rest skip."""

    run_id: str
    cell: str
    path: str  # project-relative folder
    source: str = "capsule"
    run_record: Mapping[str, Any] | None = None  # run.json
    run_record_sha256: str | None = None
    config: Mapping[str, Any] | None = None  # config.yaml, nested as written
    config_sha256: str | None = None
    train: pd.DataFrame | None = None  # train.csv (or a tracker's curve) one row per logged step
    train_path: str | None = None
    tests: Mapping[str, TestArtifacts] = field(default_factory=dict)
    legacy_metrics: Mapping[str, Any] | None = None  # best_metrics.json of an upstream-style cell
    files: Mapping[str, str] = field(default_factory=dict)  # capsule-relative path -> sha256 of what is on disk
    problems: tuple[InputProblem, ...] = ()
    # "failed (exit 3)" or "never started" when the run's manifest records the cell so (docs/gate.md §2): its
    # numbers are left out of seeds and means, and the checks and the report say so
    outcome: str | None = None

    @property
    def key(self) -> str:
        return f"{self.run_id}/{self.cell}"

    @property
    def subject(self) -> str:
        return f"capsule:{self.key}"

    @cached_property
    def flat_config(self) -> Mapping[str, Any]:
        """config.yaml flattened (configs.flatten: `a.b.c` keys), once per audit for the six checks that read
        it; read only."""
        from types import MappingProxyType

        from remote_gpu_trainer.audits.catalogue.configs import flatten

        return MappingProxyType(flatten(self.config or {}))

    def train_numbers(self, column: str) -> Any:
        """train.csv's `column` as floats (NaN where a cell is not a number), converted once per audit for the
        checks that read it (V03, V24, V25); a read-only numpy array."""
        memo: dict[str, Any] = self.__dict__.setdefault("_train_numbers", {})
        if column not in memo:
            if self.train is None:
                raise ValueError(f"{self.path} has no train.csv to read {column} from")
            import numpy as np
            import pandas as pd

            series = self.train[column]
            if not (isinstance(series.dtype, np.dtype) and series.dtype.kind in "fiub"):  # numbers already: as is
                series = pd.to_numeric(series, errors="coerce")
            values = series.to_numpy(dtype=float, na_value=np.nan)
            values.flags.writeable = False
            memo[column] = values
        return memo[column]

    def prov(self, *keys: str) -> Any:
        """A value under run.json's provenance (`prov("code", "commit")`), None when any step is absent."""
        node: Any = (self.run_record or {}).get("provenance")
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    @property
    def provenance_hash(self) -> str | None:
        value = self.prov("provenance_hash")
        return value if isinstance(value, str) else None

    @property
    def seed(self) -> Any:
        return self.prov("seed")


@dataclass(frozen=True)
class SplitMember:
    """One member of a split manifest: its split and id, and the path, sha256, group and time that VERIFY's leakage
    checks compare across splits."""

    split: str
    id: str
    path: str | None
    sha256: str | None
    group: str | None = None
    time: str | None = None


@dataclass(frozen=True)
class SplitManifest:
    """`splits/<id>.json` (docs/verify.md §5.3), with what the loader found on disk for each member path:
    `disk_sha256[path]` is the hash of the bytes there now, or None when the path does not exist."""

    split_set_id: str
    path: str  # project-relative
    sha256: str
    method: str
    hash_unit: str
    members: tuple[SplitMember, ...]
    fit_records: tuple[Mapping[str, Any], ...] = ()
    standard_reference: Mapping[str, Any] | None = None
    disk_sha256: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return f"split:{self.split_set_id}"

    def of(self, split: str) -> tuple[SplitMember, ...]:
        return tuple(m for m in self.members if m.split == split)


@dataclass(frozen=True)
class Number:
    """A reported number: one metric of one test aggregated over capsules (one per seed). From an EVIDENCE
    claim's evidence row, or, for a run no claim cites, every roster cell of the run (subject `number:`)."""

    subject: str
    claim: str | None  # the EVIDENCE claim id, None for an implicit number
    cells: tuple[str, ...]  # capsule keys <run>/<cell>
    test_id: str
    metric: str
    aggregate: str = "mean_over_seeds"  # mean_over_seeds | iqm_over_seeds | single
    stated: Mapping[str, Any] = field(default_factory=dict)  # the EVIDENCE row as written (value, variance, ...)


@dataclass(frozen=True)
class Comparison:
    """A method run against its control (rgt.toml `[[verify.compare]]`): what V01, V06 and V07 judge."""

    run: str
    control: str
    vary: tuple[str, ...] = ()
    test_id: str | None = None
    metric: str | None = None

    @property
    def subject(self) -> str:
        return f"pair:{self.run}~{self.control}"


@dataclass(frozen=True)
class MetricRule:
    """A row of the metric registry (assets/catalogue.toml [[metrics]], rgt.toml [metrics] on top)."""

    key: str
    direction: str  # max | min | monitor
    chance: str | None = None  # how V11 computes the chance floor, e.g. `majority`, `half`, `prevalence`
    basis: str = "conv"


@dataclass(frozen=True)
class ProjectEvidence:
    """Everything the catalogue reads for one project, gathered once per audit."""

    root: Path
    capsules: tuple[Capsule, ...] = ()
    splits: tuple[SplitManifest, ...] = ()
    evidence: Mapping[str, Any] | None = None  # EVIDENCE.json
    evidence_path: str | None = None
    evidence_sha256: str | None = None
    numbers: tuple[Number, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    metrics: Mapping[str, MetricRule] = field(default_factory=dict)  # declared in rgt.toml [metrics]
    manifests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # run -> PULL_MANIFEST.json
    probes: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)  # (check, subject) -> output
    log_lines: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)  # run -> (line no, text)
    problems: tuple[InputProblem, ...] = ()
    case_insensitive_fs: bool = False
    declared_runs: tuple[str, ...] = ()  # rgt.toml's runs, pulled or not (audits/catalogue/attribution.py)

    def capsule(self, key: str) -> Capsule | None:
        return self._by_key.get(key)

    def run_capsules(self, run_id: str) -> tuple[Capsule, ...]:
        return self._by_run.get(run_id, ())

    @cached_property
    def _by_key(self) -> dict[str, Capsule]:
        """Capsules by key, the first of a key winning: checks look cells up thousands of times an audit."""
        found: dict[str, Capsule] = {}
        for capsule in self.capsules:
            found.setdefault(capsule.key, capsule)
        return found

    @cached_property
    def _by_run(self) -> dict[str, tuple[Capsule, ...]]:
        runs: dict[str, list[Capsule]] = {}
        for capsule in self.capsules:
            runs.setdefault(capsule.run_id, []).append(capsule)
        return {run_id: tuple(capsules) for run_id, capsules in runs.items()}
