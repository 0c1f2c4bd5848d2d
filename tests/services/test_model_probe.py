"""`rgt probe` as a service (services/audit/model_probe.py): the probe program runs a real loader hook against real tiny
torch models saved with torch.save, in its own scrubbed process, and its answer turns into the check's finding.

The project's `probe_hooks.py` is the user's code: one architecture, several hooks, each cell's behaviour chosen
by its capsule (seed0 healthy, seed1 broken) the way a user's hook would read its capsule's config. Each probe is
a real subprocess (`python -I -m remote_gpu_trainer.isolated.model_probe`), here and on the sim box.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.providers.base import Creatable
from remote_gpu_trainer.services.audit.model_probe import ProbeOutcome, answer_of, probe_check, probe_run
from remote_gpu_trainer.services.opening import open_session
from support.capsules import write_capsule
from support.helpers import write_project

torch = pytest.importorskip("torch")

HOOKS = '''\
"""The user's probe hooks: the model of training, loaded from the capsule's best.pth with weights_only=True."""
import os
import subprocess
import time
from pathlib import Path

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 16)
        self.branch = nn.Linear(6, 16)
        self.head = nn.Linear(16, 3)
        self.detach_branch = False

    def forward(self, x):
        side = self.branch(x)
        if self.detach_branch:  # the bug V28 finds: a branch cut off from the loss
            side = side.detach()
        return self.head(torch.relu(self.body(x) + side))


def make(collapsed=False):
    torch.manual_seed(0)
    net = Net()
    if collapsed:  # the output layer learnt nothing but a constant: every input gives the same output
        with torch.no_grad():
            net.head.weight.zero_()
            net.head.bias.fill_(0.5)
    return net


def load(capsule):
    net = make()
    net.load_state_dict(torch.load(capsule / "best.pth", map_location="cpu", weights_only=True))
    return net


def data(n=32, offset=0.0):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=generator) + offset
    return x, torch.randint(0, 3, (n,), generator=generator)


def broken(capsule):
    return capsule.name == "seed1"


def scribbling(capsule):
    (capsule / "probe_cache.txt").write_text("written beside the evidence")
    return cosine(capsule)


def forging(capsule):
    """Edits a pulled file in place, keeping its size, and puts its mtime back: a size/mtime listing sees nothing."""
    target = capsule / "test" / "main" / "metrics.json"
    info = target.stat()
    text = target.read_bytes()
    target.write_bytes(text.replace(b"0", b"9", 1))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    return cosine(capsule)


def cosine(capsule):
    x, y = data()
    return {"model": load(capsule), "batch": lambda: (x, y)}


def spread(capsule):
    print("loading", capsule)  # user output on stdout, at the Python level and the file descriptor level
    os.write(1, b"{not the answer}\\n")
    x, y = data(offset=1000.0 if broken(capsule) else 0.0)
    return {"batch": lambda: {"inputs": x, "targets": y}}


def parity(capsule):
    x, _ = data(8)
    scale = 255.0 if broken(capsule) else 1.0  # the train path forgot to divide by 255

    def evaluate(model, inputs):
        model.eval()
        return model(inputs)

    return {"model": load(capsule), "train_inputs": lambda n: x[:n] * scale, "eval_inputs": lambda n: x[:n].clone(),
            "evaluate": evaluate}


def grads(capsule):
    model = load(capsule)
    model.detach_branch = broken(capsule)
    x, y = data()
    return {"model": model, "batch": lambda: (x, y), "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])}


def raising(capsule):
    raise RuntimeError("no dataset at /data/cifar")


def sleepy(capsule):
    child = subprocess.Popen(["sleep", "120"])
    (Path.cwd() / "child.pid").write_text(str(child.pid))
    time.sleep(120)


def unsafe(capsule):
    torch.load(capsule / "best.pth", weights_only=False)
'''


def make_model(collapsed: bool = False) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(HOOKS, "probe_hooks.py", "exec"), namespace)  # the very class the hook loads into
    return namespace["make"](collapsed)


def project(tmp_path: Path, hook: str, *, roster: tuple[str, ...] = ("seed0", "seed1"), timeout_s: float = 120,
            collapsed: tuple[str, ...] = ()) -> Path:
    """A sim project whose pulled capsules each hold a real best.pth, with the hooks at its root."""
    root = tmp_path / "proj"
    write_project(root, roster=roster)
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write(f'\n[verify.probe]\nhook = "{hook}"\ntimeout_s = {timeout_s}\n')
    (root / "probe_hooks.py").write_text(HOOKS, encoding="utf-8")
    for cell in roster:
        folder = write_capsule(root, "r1", cell)
        torch.save(make_model(cell in collapsed).state_dict(), folder / "best.pth")
    return root


def probe(root: Path, check: str, **kwargs: Any) -> ProbeOutcome:
    session = open_session(str(root))
    try:
        return asyncio.run(probe_run(session, "r1", check, **kwargs))
    finally:
        session.close()


def stored(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    session = open_session(str(root))
    try:
        return session.db.probe_records()
    finally:
        session.close()


def verdicts(outcome: ProbeOutcome) -> dict[str, str]:
    """cell -> the severity of its live finding, or pass."""
    live = {f.subject: f.severity for f in outcome.findings if f.status == "open"}
    return {answer.cell: live.get(answer.subject, "pass") for answer in outcome.answers}


# -- the four checks --------------------------------------------------------------------------------------------
def test_collapsed_outputs_are_critical_and_healthy_outputs_pass(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:cosine", collapsed=("seed1",))
    outcome = probe(root, "output_cosine")
    assert outcome.check == "V20" and verdicts(outcome) == {"seed0": "pass", "seed1": "critical"}
    healthy, collapsed = (dict(a.answer) for a in outcome.answers)
    assert healthy["batch"] == 32 and healthy["mean_cosine"] < 0.9
    assert collapsed["mean_cosine"] == pytest.approx(1.0) and collapsed["spread"] < 1e-6
    finding = next(f for f in outcome.findings if f.subject == "capsule:r1/seed1")
    assert "outputs identical across inputs" in finding.message
    assert set(stored(root)) == {("V20", "capsule:r1/seed0"), ("V20", "capsule:r1/seed1")}


def test_inputs_dominated_by_a_constant_offset_warn_and_user_prints_do_not_corrupt_the_answer(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:spread")
    outcome = probe(root, "V22")
    assert verdicts(outcome) == {"seed0": "pass", "seed1": "warn"}
    offset = dict(outcome.answers[1].answer)
    assert offset["mean_cosine"] > 0.99 and offset["spread_ratio"] < 0.002
    assert "sample-invariant offset" in next(f.message for f in outcome.findings if f.subject == "capsule:r1/seed1")


def test_a_train_path_that_scales_by_255_is_a_parity_error(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:parity")
    outcome = probe(root, "train_eval_parity")
    assert verdicts(outcome) == {"seed0": "pass", "seed1": "error"}
    matching, scaled = (dict(a.answer) for a in outcome.answers)
    assert matching["allclose"] is True and matching["model_training_in_eval"] is False
    assert scaled["allclose"] is False and scaled["bn_untracked"] == []
    assert scaled["train_mean"][0] == pytest.approx(255 * scaled["eval_mean"][0])


def test_a_detached_branch_leaves_dead_tensors_and_low_coverage(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:grads")
    outcome = probe(root, "V28")
    assert verdicts(outcome) == {"seed0": "pass", "seed1": "error"}
    healthy, detached = (dict(a.answer) for a in outcome.answers)
    assert (healthy["trainable"], healthy["covered"], healthy["dead"]) == (6, 6, [])
    assert detached["covered"] == 4 and detached["dead"] == ["branch.bias", "branch.weight"]
    assert healthy["optimizer_checked"] is True and healthy["not_in_optimizer"] == []


# -- the probe on the sim box ------------------------------------------------------------------------------------
def test_on_the_sim_box_the_pushed_program_runs_with_the_runs_python_in_its_workdir(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:cosine", roster=("seed0",))  # the pulled copy's model is healthy
    disk = root / ".rgt" / "sim" / "box"
    box_capsule = disk / "workspace" / "rgt" / "r1" / "seed0"
    box_capsule.mkdir(parents=True)
    torch.save(make_model(collapsed=True).state_dict(), box_capsule / "best.pth")  # the box's is not
    (disk / "workspace" / "job").mkdir(parents=True)
    (disk / "workspace" / "job" / "probe_hooks.py").write_text(HOOKS, encoding="utf-8")

    async def rent_and_probe() -> ProbeOutcome:
        session = open_session(str(root))
        try:
            provider = session.provider("box")
            assert isinstance(provider, Creatable)
            await provider.create(session.instance("box"))  # rent the sim box: its disk and its record
            return await probe_run(session, "r1", "V20", on="box")
        finally:
            await session.close_transports()
            session.close()

    outcome = asyncio.run(rent_and_probe())
    assert outcome.answers[0].where == "on box" and verdicts(outcome) == {"seed0": "critical"}
    pushed = disk / "workspace" / "job" / ".rgt" / "probe"
    assert sorted(p.name for p in pushed.iterdir()) == ["model_probe.py", "rgt_probe_stats.py"]
    assert sorted(p.name for p in box_capsule.iterdir()) == ["best.pth"]  # nothing written beside the results


def test_without_a_pulled_copy_and_without_on_the_probe_says_how_to_get_one(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:cosine", roster=("seed0",))
    (root / "runs").rename(root / "elsewhere")
    with pytest.raises(VerbFailed, match=r"no pulled copy at runs/r1/seed0/.*--on box"):
        probe(root, "V20")


# -- failures: one line, nothing stored --------------------------------------------------------------------------
@pytest.mark.parametrize(("hook", "expected"), [
    ("probe_hooks:nowhere", r"hook_not_found: hook probe_hooks:nowhere: probe_hooks has no function 'nowhere'"),
    ("no_such_module:build", r"hook_not_found: hook no_such_module:build: no module 'no_such_module'"),
    ("probe_hooks:raising", r"hook_failed: the hook raised RuntimeError: no dataset at /data/cifar"),
    ("probe_hooks:unsafe", r"hook_failed: .*torch.load\(weights_only=False\) refused"),
    ("probe_hooks:spread", r"bad_hook: V20 needs model in the hook's dict"),
])
def test_a_failing_probe_names_what_failed_and_stores_nothing(tmp_path: Path, hook: str, expected: str) -> None:
    root = project(tmp_path, hook, roster=("seed0",))
    with pytest.raises(VerbFailed, match=r"^probe V20 of r1/seed0 \(here\) failed: " + expected) as failed:
        probe(root, "V20")
    assert "\n" not in str(failed.value)
    assert stored(root) == {}


def test_a_hook_that_writes_into_the_pulled_copy_is_a_failure_that_says_so(tmp_path: Path) -> None:
    """The pulled copy is the verified evidence: a hook that writes there unverifies it (the gate then closes),
    which the probe says at once instead of storing an answer as if nothing happened."""
    root = project(tmp_path, "probe_hooks:scribbling", roster=("seed0",))
    with pytest.raises(VerbFailed, match=r"the hook changed the evidence store \(runs/r1/seed0/probe_cache.txt "
                                         r"added\): the pulled copy is no longer the verified one"):
        probe(root, "V20")
    assert stored(root) == {}


def test_a_hook_that_edits_a_file_keeping_its_size_and_mtime_is_caught_by_its_hash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 11: the store was compared by size and mtime only, so an edit of the same size with the
    mtime put back passed and its answer was stored. The store is re-hashed after every hook (content and mode),
    through the real `rgt probe`: exit 1, the file named, nothing stored."""
    root = project(tmp_path, "probe_hooks:forging", roster=("seed0",))
    metrics = root / "runs/r1/seed0/test/main/metrics.json"
    before = metrics.stat()
    assert main(["probe", "r1", "V20", str(root)]) == 1
    err = capsys.readouterr().err
    assert "the hook changed the evidence store (runs/r1/seed0/test/main/metrics.json content changed)" in err
    after = metrics.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)  # what the listing compared
    assert stored(root) == {}


def test_a_hook_that_hangs_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    root = project(tmp_path, "probe_hooks:sleepy", roster=("seed0",), timeout_s=8)
    started = time.monotonic()
    with pytest.raises(VerbFailed, match=r"no answer within 8 s \(timeout_s in \[verify.probe\]\)"):
        probe(root, "V20")
    assert time.monotonic() - started < 60
    assert stored(root) == {}
    pid_file = root / "child.pid"
    if pid_file.exists():  # the hook got as far as starting its child before the timeout
        assert not alive(int(pid_file.read_text()))


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for init to reap it does not), after a moment to die."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


# -- what is refused before anything runs ------------------------------------------------------------------------
def test_checks_are_named_by_id_or_name_and_only_the_probe_checks_are_accepted() -> None:
    assert probe_check("V20").id == "V20" and probe_check("grad_coverage").id == "V28"
    with pytest.raises(ConfigError, match="V04 seed_count is not a probe check"):
        probe_check("V04")
    with pytest.raises(ConfigError, match="'bogus' is not a VERIFY check"):
        probe_check("bogus")


def test_a_project_without_a_hook_or_with_an_unknown_cell_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    write_project(root)
    with pytest.raises(ConfigError, match=r"add \[verify.probe\]"):
        probe(root, "V20")
    root = project(tmp_path, "probe_hooks:cosine")
    with pytest.raises(ConfigError, match="run r1 has no cell 'seed9'"):
        probe(root, "V20", cell="seed9")
    with pytest.raises(ConfigError, match="no instance 'nobox'"):
        probe(root, "V20", on="nobox")


@pytest.mark.parametrize(("body", "problem"), [
    ('hook = "probe_hooks"', "is not module:function"),
    ('hook = "a:b"\ntimeout_s = 0', "must be a finite number > 0"),
    ('hook = "a:b"\nhok = "x"', "unknown key"),
])
def test_the_probe_table_of_rgt_toml_is_checked(tmp_path: Path, body: str, problem: str) -> None:
    root = tmp_path / "proj"
    write_project(root)
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write(f"\n[verify.probe]\n{body}\n")
    with pytest.raises(ConfigError, match=problem):
        load_project(root / "rgt.toml")


def test_the_probe_table_defaults_and_leaves_check_params_alone(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root)
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write('\n[verify.probe]\nhook = "pkg.hooks:build"\n\n[verify.output_cosine]\nmin_batch = 32\n')
    verify = load_project(root / "rgt.toml").audit
    assert (verify.probe.hook, verify.probe.timeout_s) == ("pkg.hooks:build", 300.0)
    assert verify.overrides == {"V20": {"min_batch": 32}}


@pytest.mark.parametrize(("answer", "wrong"), [
    ({"batch": 32, "mean_cosine": 0.5}, "spread"),
    ({"batch": True, "mean_cosine": 0.5, "spread": 0.1}, "batch"),
    ({"batch": 32, "mean_cosine": "0.5", "spread": 0.1}, "mean_cosine"),
])
def test_an_answer_missing_or_mistyping_a_field_the_check_reads_is_refused(answer: dict[str, Any],
                                                                           wrong: str) -> None:
    from remote_gpu_trainer.services.audit.model_probe import Target

    target = Target("r1/seed0", "here", "/p", "/p/runs/r1/seed0")
    with pytest.raises(VerbFailed, match=f"lacks or mistypes {wrong}$"):
        answer_of("V20", {"ok": True, "check": "V20", "answer": answer}, target)
