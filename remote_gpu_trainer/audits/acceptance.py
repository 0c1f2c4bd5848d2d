"""Independent acceptance: the scientific core of a verified bundle, the acceptance record, and comparing two.

Pure: these functions take parsed values (or bytes) and return values and problems; they open no file.

A bundle is accepted on a second machine (services/audit/acceptance.py): its files are re-hashed there, its checkpoints
load-checked there, and its metrics files read there (remote/accept_bundle.py). From what that machine read, the
**scientific core** is derived: what the reported numbers depend on, and nothing else. Its entries, each keyed by a
string that always holds a `/` (cell and test ids are safe names, docs/gate.md §1):

- `<cell>/<test>/metric/<name>`: the `value` of each metric in `<cell>/test/<test>/metrics.json`;
- `<cell>/<test>/n`: that file's `n` (the number of test items), or null;
- `<cell>/<test>/checkpoint_sha256`: the checkpoint hash that file names, or null;
- `<cell>/<test>/results/<file>`: the sha256 of `<cell>/test/<test>/results.parquet` or `results.csv`, as re-hashed;
- `<cell>/best_metrics/metric/<name>`: each number of a legacy `<cell>/best_metrics.json` (epoch, step and
  bookkeeping keys such as the seed left out, as the VERIFY reader leaves them out).

Timestamps, hostnames, paths, eval commands and every other field are not in it: two machines that read the same
bytes derive the same core, and a changed number, item file or checkpoint binding changes it.

Two acceptance records MATCH when their cores (and the run and manifest they accepted) are equal and they come from
different machines; INDEPENDENCE_FAILED when both come from one machine (an acceptance on the machine that already
accepted the bundle proves nothing); DIFF, listing every differing entry, otherwise. A machine is its hostname and
machine id as that machine answered them. Simulated boxes (provider `sim`) are folders of this host and answer this
host's hostname and machine id: for them the instance name (its own disk) is what tells them apart, a simulation of
two machines rather than a proof.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.catalogue.readers.best_metrics import BOOKKEEPING_KEYS, EPOCH_KEYS, STEP_KEYS
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, Manifest, Problem
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.toml_table import key_problems

ACCEPTANCE_SCHEMA = "remote-gpu-trainer/ACCEPTANCE/v1"
RECORD_PREFIX = "ACCEPTANCE-"
MATCH, DIFF, INDEPENDENCE_FAILED = "MATCH", "DIFF", "INDEPENDENCE_FAILED"
_METRICS = re.compile(r"^([^/]+)/test/([^/]+)/metrics\.json$")
_RESULTS = re.compile(r"^([^/]+)/test/([^/]+)/(results\.(?:parquet|csv))$")
_LEGACY = re.compile(r"^([^/]+)/best_metrics\.json$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LEGACY_SKIP = frozenset({*EPOCH_KEYS, *STEP_KEYS, *BOOKKEEPING_KEYS, "split"})
_IDENTITY_KEYS = ("hostname", "machine_id", "instance", "provider", "python", "torch", "platform")
_RECORD_KEYS = {"schema", "run", "machine", "identity", "accepted_at", "rgt_version", "manifest_sha256", "files",
                "checkpoints", "core", "problems", "ok"}

CoreValue = float | int | str | None


@dataclass(frozen=True)
class Identity:
    """The machine an acceptance ran on, as that machine answered (hostname, machine id) and as rgt.toml names it."""

    hostname: str
    machine_id: str | None
    instance: str | None  # the rgt.toml instance; None for `--here`
    provider: str | None  # that instance's provider; None for `--here`
    python: str | None = None
    torch: str | None = None
    platform: str | None = None

    @property
    def sim_box(self) -> str | None:
        """The simulated box's name: the only thing that tells two sim boxes of one host apart."""
        return self.instance if self.provider == "sim" else None

    def to_dict(self) -> dict[str, str | None]:
        return {key: getattr(self, key) for key in _IDENTITY_KEYS}


@dataclass(frozen=True)
class Difference:
    """One entry of the scientific core whose value differs between two acceptance records, or that one of them
    lacks."""

    key: str
    a: CoreValue
    b: CoreValue
    missing: str | None = None  # "a" or "b" when the entry is absent on that side


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing two acceptance records: MATCH, DIFF or INDEPENDENCE_FAILED, the differences, and why."""

    verdict: str  # MATCH, DIFF or INDEPENDENCE_FAILED
    differences: tuple[Difference, ...]
    reason: str


@dataclass(frozen=True)
class Answer:
    """What the far side printed (remote/accept_bundle.py), checked for shape."""

    identity: Mapping[str, Any]
    files: Mapping[str, str | None]
    problems: tuple[Problem, ...]
    metrics: Mapping[str, Any]
    checkpoints: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class AcceptanceRecord:
    """One acceptance record as read back: the run, the machine it was accepted on, its identity, the manifest hash
    and the scientific core compared with another record's."""

    path: str  # where it was read from (for messages)
    run: str
    machine: str
    identity: Identity
    manifest_sha256: str
    core: Mapping[str, CoreValue]
    ok: bool
    document: Mapping[str, Any]


# -- the core -----------------------------------------------------------------------------------------------------
def metrics_paths(paths: Iterable[str]) -> list[str]:
    """The files the core reads as JSON: every `<cell>/test/<test>/metrics.json` and legacy best_metrics.json."""
    return sorted(path for path in paths if _METRICS.match(path) or _LEGACY.match(path))


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def scientific_core(metrics: Mapping[str, Any], hashes: Mapping[str, str | None]
                    ) -> tuple[dict[str, CoreValue], list[Problem]]:
    """The core (module docstring) from the parsed metrics files and the re-hashed files of one machine."""
    core: dict[str, CoreValue] = {}
    problems: list[Problem] = []
    for path, data in sorted(metrics.items()):
        capsule, legacy = _METRICS.match(path), _LEGACY.match(path)
        if capsule is not None:
            problems += _capsule_entries(core, f"{capsule.group(1)}/{capsule.group(2)}", path, data)
        elif legacy is not None:
            problems += _legacy_entries(core, legacy.group(1), path, data)
    for path, digest in sorted(hashes.items()):
        results = _RESULTS.match(path)
        if results is not None:
            core[f"{results.group(1)}/{results.group(2)}/results/{results.group(3)}"] = digest
    return dict(sorted(core.items())), problems


def _capsule_entries(core: dict[str, CoreValue], prefix: str, path: str, data: Any) -> list[Problem]:
    """A metrics.json's metric values, n and checkpoint binding, under `<cell>/<test>/`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("metrics"), Mapping):
        return [Problem("core_invalid", path, "not a metrics.json object with a metrics mapping")]
    problems = []
    for name, block in sorted(data["metrics"].items()):
        value = _number(block.get("value") if isinstance(block, Mapping) else block)
        if value is None:
            problems.append(Problem("core_invalid", path, f"metric {name!r} has no finite number value"))
        else:
            core[f"{prefix}/metric/{name}"] = value
    n = data.get("n")
    core[f"{prefix}/n"] = n if isinstance(n, int) and not isinstance(n, bool) else None
    checkpoint = data.get("checkpoint_sha256")
    core[f"{prefix}/checkpoint_sha256"] = checkpoint if isinstance(checkpoint, str) else None
    return problems


def _legacy_entries(core: dict[str, CoreValue], cell: str, path: str, data: Any) -> list[Problem]:
    if not isinstance(data, Mapping):
        return [Problem("core_invalid", path, "not a JSON object of metric -> number")]
    for name, value in sorted(data.items()):
        number = _number(value)
        if name not in _LEGACY_SKIP and number is not None:
            core[f"{cell}/best_metrics/metric/{name}"] = number
    return []


# -- comparing ----------------------------------------------------------------------------------------------------
def same_machine(a: Identity, b: Identity) -> bool:
    """One machine, as far as the records can tell: the same hostname or the same machine id (a shared one is
    enough to prove nothing), unless they are two different simulated boxes (module docstring)."""
    if a.sim_box != b.sim_box:
        return False
    return a.hostname == b.hostname or (a.machine_id is not None and a.machine_id == b.machine_id)


def core_differences(core_a: Mapping[str, CoreValue], core_b: Mapping[str, CoreValue]) -> tuple[Difference, ...]:
    """Every entry that differs, is only in one core, or changes type (1 and 1.0 are one number)."""
    differences = []
    for key in sorted(set(core_a) | set(core_b)):
        if key not in core_a or key not in core_b:
            differences.append(Difference(key, core_a.get(key), core_b.get(key), "a" if key not in core_a else "b"))
        elif not _equal(core_a[key], core_b[key]):
            differences.append(Difference(key, core_a[key], core_b[key]))
    return tuple(differences)


def _equal(a: CoreValue, b: CoreValue) -> bool:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    return float(a) == float(b)


def compare(core_a: Mapping[str, CoreValue], core_b: Mapping[str, CoreValue], identity_a: Identity,
            identity_b: Identity) -> Verdict:
    """MATCH, DIFF or INDEPENDENCE_FAILED (module docstring); the differing entries either way."""
    differences = core_differences(core_a, core_b)
    if same_machine(identity_a, identity_b):
        return Verdict(INDEPENDENCE_FAILED, differences, f"both acceptances ran on one machine "
                       f"({identity_a.hostname}{_box(identity_a)}): a second acceptance there proves nothing")
    if differences:
        return Verdict(DIFF, differences, f"{len(differences)} core entry(ies) differ")
    if not core_a:
        return Verdict(MATCH, (), "no scientific core (no metrics or results files): only the manifest was compared")
    return Verdict(MATCH, (), f"{len(core_a)} core entries equal, on two machines")


def _box(identity: Identity) -> str:
    return f", sim box {identity.sim_box}" if identity.sim_box else ""


def compare_records(a: AcceptanceRecord, b: AcceptanceRecord) -> Verdict:
    """compare() over the records' cores, with the run and the manifest sha256 they accepted as two more entries
    (keys without a `/`, so never a core key): records of two different bundles never MATCH."""
    core_a = {"run": a.run, "manifest_sha256": a.manifest_sha256, **a.core}
    core_b = {"run": b.run, "manifest_sha256": b.manifest_sha256, **b.core}
    return compare(core_a, core_b, a.identity, b.identity)


# -- the far side's answer ----------------------------------------------------------------------------------------
def parse_answer(stdout: bytes) -> tuple[Answer | None, str]:
    """The one JSON object accept_bundle printed, checked for shape (the far side is not trusted); or why not."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    if len(lines) != 1:
        return None, f"{len(lines)} lines on stdout instead of one JSON answer"
    try:
        data = loads_strict(lines[0])
    except ValueError as exc:
        return None, f"the answer is not JSON ({exc})"
    if not isinstance(data, dict) or data.get("ok") is not True:
        return None, f"the answer is not a result: {str(data.get('error') if isinstance(data, dict) else data)[:200]}"
    shape = _answer_shape_problems(data)
    if shape:
        return None, f"the answer is malformed: {shape[0]}"
    problems = tuple(Problem(str(p["code"]), str(p["path"]), str(p["detail"])) for p in data["problems"])
    return Answer(data["identity"], data["files"], problems, data["metrics"], data["checkpoints"]), ""


def _answer_shape_problems(data: Mapping[str, Any]) -> list[str]:
    identity, files, checkpoints = data.get("identity"), data.get("files"), data.get("checkpoints")
    wrong = []
    if not isinstance(identity, dict) or not isinstance(identity.get("hostname"), str) \
            or not all(isinstance(identity.get(k), str | None) for k in ("machine_id", "python", "torch", "platform")):
        wrong.append("identity")
    if not isinstance(files, dict) or not all(v is None or (isinstance(v, str) and _SHA256.match(v))
                                              for v in files.values()):
        wrong.append("files")
    if not isinstance(data.get("problems"), list) or not all(
            isinstance(p, dict) and all(isinstance(p.get(k), str) for k in ("code", "path", "detail"))
            for p in data["problems"]):
        wrong.append("problems")
    if not isinstance(data.get("metrics"), dict):
        wrong.append("metrics")
    if not isinstance(checkpoints, dict) or not all(isinstance(v, dict) and isinstance(v.get("ok"), bool)
                                                    for v in checkpoints.values()):
        wrong.append("checkpoints")
    return wrong


def answer_identity(answer: Answer, instance: str | None, provider: str | None) -> Identity:
    got = answer.identity
    return Identity(hostname=str(got["hostname"]), machine_id=got.get("machine_id"), instance=instance,
                    provider=provider, python=got.get("python"), torch=got.get("torch"), platform=got.get("platform"))


# -- the record ---------------------------------------------------------------------------------------------------
def bundle_problems(manifest: Manifest, answer: Answer, checkpoints: Sequence[str]) -> list[Problem]:
    """What the second machine found wrong with the bundle: its own problems, every file whose hash there is not
    the manifest's, the manifest itself re-hashed to another identity, and every checkpoint that did not load."""
    problems = list(answer.problems)
    for entry in manifest.files:
        got = answer.files.get(entry.path)
        if got is not None and got != entry.sha256:
            problems.append(Problem("hash_mismatch", entry.path,
                                    f"sha256 there {got[:12]}…, manifest {entry.sha256[:12]}…"))
        elif entry.path not in answer.files:
            problems.append(Problem("missing", entry.path, "not re-hashed there"))
    there = answer.files.get(MANIFEST_NAME)
    if there is not None and there != manifest.sha256:
        problems.append(Problem("manifest_mismatch", MANIFEST_NAME, "the manifest there is not the one pulled here"))
    for path in checkpoints:
        verdict = answer.checkpoints.get(path)
        if verdict is None and answer.files.get(path) is not None:
            problems.append(Problem("ckpt_unchecked", path, "no load result from there"))
        elif verdict is not None and not verdict["ok"]:
            problems.append(Problem(f"ckpt_{verdict.get('error')}", path, str(verdict.get("detail") or "")[:300]))
    return problems


def record_document(*, run: str, machine: str, identity: Identity, accepted_at: str, rgt_version: str,
                    manifest: Manifest, answer: Answer, checkpoints: Sequence[str]) -> dict[str, Any]:
    """The ACCEPTANCE/v1 record (services/audit/acceptance.py writes it): who accepted what, when, and the core."""
    core, core_problems = scientific_core(answer.metrics, answer.files)
    problems = bundle_problems(manifest, answer, checkpoints) + core_problems
    return {
        "schema": ACCEPTANCE_SCHEMA, "run": run, "machine": machine, "identity": identity.to_dict(),
        "accepted_at": accepted_at, "rgt_version": rgt_version,
        "manifest_sha256": answer.files.get(MANIFEST_NAME) or manifest.sha256,
        "files": dict(sorted(answer.files.items())),
        "checkpoints": {path: dict(verdict) for path, verdict in sorted(answer.checkpoints.items())},
        "core": core, "problems": [p.to_dict() for p in problems], "ok": not problems,
    }


def parse_record(data: bytes, where: str) -> tuple[AcceptanceRecord | None, list[str]]:
    """An acceptance record read back strictly: exactly the v1 keys, a typed identity and core; or every problem."""
    try:
        raw = loads_strict(data)
    except ValueError as exc:
        return None, [f"not JSON ({exc})"]
    if not isinstance(raw, dict):
        return None, ["not a JSON object"]
    problems = key_problems(raw, _RECORD_KEYS, required=_RECORD_KEYS)
    if raw.get("schema") != ACCEPTANCE_SCHEMA:
        problems.append(f"schema is not {ACCEPTANCE_SCHEMA}")
    identity = _record_identity(raw.get("identity"), problems)
    core = raw.get("core")
    if not isinstance(core, dict) or not all(isinstance(v, str | None) or _number(v) is not None
                                             for v in core.values()):
        problems.append("core is not a mapping of entry -> number, string or null")
    for key in ("run", "machine"):
        if not isinstance(raw.get(key), str):
            problems.append(f"{key} is not a string")
    if not isinstance(raw.get("manifest_sha256"), str) or not _SHA256.match(raw["manifest_sha256"]):
        problems.append("manifest_sha256 is not a sha256")
    if not isinstance(raw.get("ok"), bool):
        problems.append("ok is not true or false")
    if problems or identity is None or not isinstance(core, dict):
        return None, problems or ["identity is malformed"]
    return AcceptanceRecord(where, raw["run"], raw["machine"], identity, raw["manifest_sha256"], core, raw["ok"],
                            raw), []


def _record_identity(raw: Any, problems: list[str]) -> Identity | None:
    if not isinstance(raw, dict) or set(raw) != set(_IDENTITY_KEYS) or not isinstance(raw.get("hostname"), str) \
            or not all(isinstance(raw[k], str | None) for k in _IDENTITY_KEYS):
        problems.append(f"identity is not an object of exactly {', '.join(_IDENTITY_KEYS)} (strings or null)")
        return None
    return Identity(**raw)
