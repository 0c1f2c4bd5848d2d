"""The teardown gate's evidence conditions G1-G5 and G7 (docs/gate.md §7), as a pure function.

Beyond the marker's own conditions, the evidence is bound to everything it depends on (docs/gate.md):
the verification record in the state database (a forged or edited marker is not evidence), the run's
configuration it was verified under, the launches of the run (a launch after the verification, or a job
still running, is not covered), and the manifest still on the box when the box answers.

`evaluate_gate` reads nothing: the service gathers the bytes, listings and hashes (`services.gate.
gather_gate_inputs`) and this decides. It is evaluated when the dialog opens and again right before the
provider call, so it must be cheap and must never trust anything but the inputs: a marker for another run
or manifest, an upstream-format marker, counts without hashes, or an approval made before the gate opened
all leave it closed. G6 (the action fully described) belongs to the teardown screen and arrives as a flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    MARKER_NAME,
    Adoption,
    Manifest,
    Marker,
    canonical_json,
    is_checkpoint,
    parse_manifest,
    parse_marker,
    required_checkpoints,
    sha256_bytes,
)
from remote_gpu_trainer.config.project import RunConfig

MAX_FILE_REASONS = 10
CONFIG_CHANGED = "rgt.toml changed since verification: run verify"
LIVE_STATES = ("running", "stalled")


def evidence_config(run: RunConfig) -> dict[str, object]:
    """The part of a run's configuration that decides what its evidence means: where the results are,
    which cells and files they must hold, and how checkpoints are judged. A verification holds for it only.
    Taken as rgt.toml states it (`as_configured`): a run bound to its launch's remote_root and roster is
    still re-verified after either is edited (docs/gate.md §7, binding 4 and "Launch-time bindings")."""
    run = run.as_configured()
    return {"remote_root": run.remote_root, "roster": list(run.roster), "required": list(run.required),
            "checkpoint_globs": list(run.checkpoint_globs), "state_keys": list(run.state_keys),
            "allowed_globals": list(run.allowed_globals)}


def config_sha256(run: RunConfig) -> str:
    return sha256_bytes(canonical_json(evidence_config(run)))


@dataclass(frozen=True)
class VerificationSeen:
    """The last verification the state database recorded for the run (services read it, the gate compares)."""

    ok: bool
    at: datetime
    manifest_sha256: str | None
    marker_sha256: str | None
    config_sha256: str | None


class LocalFile(NamedTuple):
    """One entry under the local root (manifest and marker excluded), as `lstat` saw it.

    `sha256` is None when the file was not hashed (not a regular file, not in the manifest, or its size
    already differs); `regular` is False for symlinks, FIFOs and other non-regular entries.
    """

    path: str
    size: int
    mtime_ns: int
    sha256: str | None
    regular: bool = True


@dataclass(frozen=True)
class Approval:
    """What the user typed (`instance_id`) and when, from the event log."""

    instance_id: str
    at: datetime


@dataclass(frozen=True)
class GateInputs:
    """Everything the gate decides on, gathered by services.gate.gather_gate_inputs, so evaluate_gate reads nothing
    and can be evaluated again right before the provider call."""

    run_id: str
    roster: tuple[str, ...]
    required: tuple[str, ...]
    checkpoint_globs: tuple[str, ...]
    marker: bytes | None
    manifest: bytes | None
    manifest_mtime_ns: int | None
    recorded_manifest_sha256: str | None
    local_files: tuple[LocalFile, ...]
    instance_id: str
    approval: Approval | None
    now: datetime
    action_described: bool
    remote_manifest_sha256: str | None = None  # re-read from the box now, when it was reachable
    remote_checked: bool = False  # the box answered: a None hash then means the manifest is gone from it
    verification: VerificationSeen | None = None  # the last verification recorded for this run
    config_sha256: str = ""  # of the run's evidence configuration as rgt.toml says now
    launched_at: datetime | None = None  # the run's latest launch, from the launch log
    manifest_built_at: datetime | None = None  # when the recorded manifest was built on the box
    liveness: str | None = None  # the job's state on the box now, when it was asked
    adopted_run_id: str | None = None  # the recorded manifest was adopted, naming this run id (docs/gate.md §2.1)
    not_home: str | None = None  # why the local root is not a local copy (services/evidence/local_root.not_home)

    @property
    def adoption(self) -> Adoption | None:
        """The adoption recorded with the manifest hash: it applies only to the bytes of that hash."""
        if self.recorded_manifest_sha256 is None or self.adopted_run_id is None:
            return None
        return Adoption(self.recorded_manifest_sha256, self.adopted_run_id)


@dataclass(frozen=True)
class GateDecision:
    """The gate's answer: open or not, every reason it is closed, and warnings that do not close it."""

    open: bool
    reasons: list[str]
    warnings: list[str] = field(default_factory=list)


def evaluate_gate(inputs: GateInputs) -> GateDecision:
    """Open only when every condition holds; otherwise every failed condition is named."""
    reasons: list[str] = []
    warnings: list[str] = []
    marker = _evidence(inputs, reasons, warnings)
    if not inputs.action_described:
        reasons.append("the action is not fully described (provider, instance, what it destroys)")
    _g7_approval(inputs, marker, reasons)
    return GateDecision(open=not reasons, reasons=reasons, warnings=warnings)


def evaluate_evidence_only(inputs: GateInputs) -> GateDecision:
    """G1-G5 alone: what a dashboard shows before anyone has typed an approval. Never enough to act on."""
    reasons: list[str] = []
    warnings: list[str] = []
    _evidence(inputs, reasons, warnings)
    return GateDecision(open=not reasons, reasons=reasons, warnings=warnings)


def _evidence(inputs: GateInputs, reasons: list[str], warnings: list[str]) -> Marker | None:
    """G1-G5 and the bindings, appending reasons; returns the marker when it parsed (G7 compares the
    approval with it)."""
    _job_finished(inputs, reasons)
    if inputs.not_home is not None:  # a copy that is the box's own files, or on a mount of them, is not home
        reasons.append(f"runs/{inputs.run_id} is not a local copy: {inputs.not_home}")
    marker = _g1_marker(inputs, reasons)
    manifest = _g2_binding(inputs, marker, reasons, warnings)
    if marker is not None:
        _g3_freshness(inputs, marker, reasons)
        _bound_to_record(inputs, marker, reasons)
    if manifest is not None:
        _g4_counts(inputs, marker, manifest, reasons)
        _g5_roster(inputs, manifest, reasons)
    return marker


def _job_finished(inputs: GateInputs, reasons: list[str]) -> None:
    """A job still running (or stalled, which may resume) is writing results nobody has pulled yet."""
    if inputs.liveness in LIVE_STATES:
        reasons.append(f"run {inputs.run_id} is {inputs.liveness} on the box: its results are not final")


def _bound_to_record(inputs: GateInputs, marker: Marker, reasons: list[str]) -> None:
    """The marker is evidence only as the last verification rgt recorded for this run, under this
    configuration, of the launch whose results these are."""
    seen = inputs.verification
    data = inputs.marker or b""
    if seen is None:
        reasons.append(f"{MARKER_NAME} was not written by a verification recorded in the state database: run verify")
        return
    if not seen.ok:
        reasons.append(f"the last verification of {inputs.run_id} failed; {MARKER_NAME} is not its result: "
                       "run verify")
    elif seen.marker_sha256 != sha256_bytes(data) or seen.manifest_sha256 != marker.manifest_sha256:
        reasons.append(f"{MARKER_NAME} is not the one the last verification wrote (edited or copied): run verify")
    if seen.config_sha256 != inputs.config_sha256:
        reasons.append(CONFIG_CHANGED)
    launched, built = inputs.launched_at, inputs.manifest_built_at
    if launched is not None and built is not None and launched >= built:
        reasons.append(f"run {inputs.run_id} was launched again after its manifest was built: the box holds "
                       "results no manifest lists, so this evidence cannot cover them")
    elif launched is not None and launched >= marker.verified_at:
        reasons.append(f"run {inputs.run_id} was launched again after its verification: the box holds newer "
                       "results; pull and verify them")


def _g1_marker(inputs: GateInputs, reasons: list[str]) -> Marker | None:
    if inputs.marker is None:
        reasons.append(f"no {MARKER_NAME}: run verify")
        return None
    marker, problems = parse_marker(inputs.marker)
    reasons.extend(problems)
    return marker


def _g2_binding(inputs: GateInputs, marker: Marker | None, reasons: list[str],
                warnings: list[str]) -> Manifest | None:
    """Marker, manifest and run record name the same run and the same manifest bytes."""
    if inputs.manifest is None:
        reasons.append(f"no {MANIFEST_NAME}: run pull")
        return None
    manifest, problems = parse_manifest(inputs.manifest, roster=inputs.roster, run_id=inputs.run_id,
                                        adopted=inputs.adoption)
    reasons.extend(f"{MANIFEST_NAME}: {problem.line()}" for problem in problems
                   if problem.code != "roster_mismatch")  # G5 names the roster difference
    local_sha = sha256_bytes(inputs.manifest)
    recorded = inputs.recorded_manifest_sha256
    if recorded is None:
        reasons.append("no manifest hash recorded at build time for this run: build the manifest with rgt "
                       "(`rgt pull` builds it, or adopts the one the skill's build_pull_manifest.py wrote)")
    elif recorded != local_sha:
        reasons.append(f"local {MANIFEST_NAME} is not the manifest recorded at build time")
    if inputs.remote_checked:
        if inputs.remote_manifest_sha256 is None:
            reasons.append(f"the manifest on the box is gone ({MANIFEST_NAME} missing from the result root)")
        elif inputs.remote_manifest_sha256 != local_sha:
            reasons.append(f"the {MANIFEST_NAME} on the box differs from the local one")
    else:
        warnings.append("remote not re-checked: the box did not answer, so its manifest was not re-read")
    if marker is not None:
        if marker.run_id != inputs.run_id:
            reasons.append(f"{MARKER_NAME} is for run {marker.run_id!r}, not {inputs.run_id!r}: run verify")
        if marker.manifest_sha256 != local_sha:
            reasons.append(f"{MARKER_NAME} was made for another manifest: run verify")
    return manifest


def _g3_freshness(inputs: GateInputs, marker: Marker, reasons: list[str]) -> None:
    """Nothing in the local root may be newer than the verification."""
    verified_ns = _ns(marker.verified_at)
    if inputs.manifest_mtime_ns is not None and inputs.manifest_mtime_ns > verified_ns:
        reasons.append(f"{MANIFEST_NAME} changed after verification: run verify")
    changed = sorted(entry.path for entry in inputs.local_files if entry.mtime_ns > verified_ns)
    _add_file_reasons(reasons, changed, "changed after verification: run verify")
    if marker.verified_at > inputs.now:
        reasons.append(f"{MARKER_NAME} claims a verification in the future: run verify")


def _g4_counts(inputs: GateInputs, marker: Marker | None, manifest: Manifest, reasons: list[str]) -> None:
    """Every listed file present with its size and hash; nothing extra; marker totals and checkpoints."""
    local = {entry.path: entry for entry in inputs.local_files}
    listed = manifest.by_path()
    missing, wrong_size, wrong_hash, odd = [], [], [], []
    for path, entry in listed.items():
        found = local.get(path)
        if found is None:
            missing.append(path)
        elif not found.regular:
            odd.append(path)
        elif found.size != entry.bytes:
            wrong_size.append(path)
        elif found.sha256 is None or found.sha256.lower() != entry.sha256:
            wrong_hash.append(path)
    extra = sorted(path for path in local if path not in listed)
    _add_file_reasons(reasons, sorted(missing), "missing locally: run pull")
    _add_file_reasons(reasons, sorted(odd), "is not a regular file")
    _add_file_reasons(reasons, sorted(wrong_size), "size differs from the manifest: run pull, then verify")
    _add_file_reasons(reasons, sorted(wrong_hash), "content differs from the manifest (sha256)")
    _add_file_reasons(reasons, extra, "is not in the manifest (unexpected local file)")
    total_files, total_bytes = len(manifest.files), manifest.total_bytes
    local_bytes = sum(entry.size for entry in inputs.local_files)
    if len(inputs.local_files) != total_files or local_bytes != total_bytes:
        reasons.append(f"local root holds {len(inputs.local_files)} files, {local_bytes} bytes; "
                       f"the manifest lists {total_files} files, {total_bytes} bytes")
    if marker is None:
        return
    if marker.files != total_files or marker.bytes != total_bytes:
        reasons.append(f"{MARKER_NAME} counts ({marker.files} files, {marker.bytes} bytes) differ from the "
                       "manifest: run verify")
    checked = {item.path: item for item in marker.checkpoints}
    needed = set(required_checkpoints(manifest.finished(inputs.roster), inputs.required, inputs.checkpoint_globs))
    needed |= {path for path in listed if is_checkpoint(path, inputs.checkpoint_globs)}
    for path in sorted(needed):
        item = checked.get(path)
        if item is None:
            reasons.append(f"{path} was not load-verified: run verify")
        elif path not in listed or item.sha256 != listed[path].sha256:
            reasons.append(f"{path}: the load-verified bytes are not the manifest's: run verify")


def _g5_roster(inputs: GateInputs, manifest: Manifest, reasons: list[str]) -> None:
    cells, roster = set(manifest.top_level_dirs), set(inputs.roster)
    if cells != roster:
        parts = []
        if roster - cells:
            parts.append("missing " + ", ".join(sorted(roster - cells)))
        if cells - roster:
            parts.append("unexpected " + ", ".join(sorted(cells - roster)))
        reasons.append("manifest cells differ from the roster: " + "; ".join(parts))


def _g7_approval(inputs: GateInputs, marker: Marker | None, reasons: list[str]) -> None:
    """The instance id typed exactly, after the verification that opened the gate."""
    approval = inputs.approval
    if approval is None:
        reasons.append(f"not approved: type the instance id {inputs.instance_id}")
        return
    if approval.instance_id != inputs.instance_id:
        reasons.append(f"approval names {approval.instance_id!r}, not this instance {inputs.instance_id!r}")
    if approval.at > inputs.now:
        reasons.append("approval is dated in the future")
    # The event log stamps approvals in whole seconds; an approval in the verification's own second counts.
    if marker is not None and approval.at < marker.verified_at.replace(microsecond=0):
        reasons.append("approval was given before the latest verification: approve again")


def _add_file_reasons(reasons: list[str], paths: Sequence[str], what: str) -> None:
    for path in paths[:MAX_FILE_REASONS]:
        reasons.append(f"{path} {what}")
    if len(paths) > MAX_FILE_REASONS:
        reasons.append(f"and {len(paths) - MAX_FILE_REASONS} more files {what}")


def _ns(moment: datetime) -> int:
    """Exact nanoseconds since the epoch (float timestamps would lose the microseconds)."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
