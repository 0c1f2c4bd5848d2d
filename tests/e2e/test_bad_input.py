"""Careless and hostile input that is not from the box: rgt.toml values, `rgt init`, help texts, `--output`.

Everything runs through `cli.main` in-process (real files, the real parser and validator) or the installed
module in a subprocess where an exit status or SystemExit is what is tested. Each refusal is one line on
stderr with exit 2, and leaves the files as they were.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.cli.parser import VERB_HELP, VERBS
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table
from support.helpers import write_project

RGT = [sys.executable, "-m", "remote_gpu_trainer"]


def rgt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RGT, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1764417600"})


def one_line_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run rgt in-process; it must exit 2 with exactly one line on stderr."""
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- rgt.toml values --------------------------------------------------------------------------------------

@pytest.mark.parametrize("price", ["inf", "-inf", "nan", "+nan", "-1.0", "true", '"1.0"'])
def test_price_per_hour_must_be_a_finite_number_at_least_zero(tmp_path: Path, price: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = write_project(tmp_path / "p", instance_body=f'provider = "sim"\nprice_per_hour = {price}')
    line = config.read_text().splitlines().index(f"price_per_hour = {price}") + 1
    with pytest.raises(ConfigError) as caught:
        load_project(config)
    assert f"{config}:{line}: instances.box.price_per_hour: must be a finite number >= 0" in str(caught.value)
    err = one_line_error(capsys, "--report", str(tmp_path / "p"))
    assert f"rgt.toml:{line}: instances.box.price_per_hour" in err


@pytest.mark.parametrize("price", ["0", "0.0", "1.49", "12"])
def test_finite_prices_load(tmp_path: Path, price: str) -> None:
    config = write_project(tmp_path / "p", instance_body=f'provider = "sim"\nprice_per_hour = {price}')
    assert load_project(config).instances["box"].price_per_hour == float(price)


def test_a_byte_order_mark_at_the_start_of_rgt_toml_is_accepted(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = write_project(tmp_path / "p")
    config.write_bytes(b"\xef\xbb\xbf" + config.read_bytes())
    project = load_project(config)
    assert project.name == "test-project" and "r1" in project.runs
    assert main(["--report", str(tmp_path / "p")]) == 0, capsys.readouterr().err
    # and a problem in such a file still names the right line
    text = config.read_bytes().replace(b'provider = "sim"', b'provider = "sim"\nprice_per_hour = nan')
    config.write_bytes(text)
    line = text.decode("utf-8-sig").splitlines().index("price_per_hour = nan") + 1
    with pytest.raises(ConfigError, match=rf"rgt.toml:{line}: instances.box.price_per_hour"):
        load_project(config)


def two_instances(root: Path, first: str, second: str) -> Path:
    """A project whose run uses `a`, with a second entry `b` (each body is TOML lines)."""
    config = write_project(root, instance="a", instance_body=first)
    text = config.read_text().replace("[runs.r1]", f"[instances.b]\n{second}\n\n[runs.r1]")
    config.write_text(text)
    return config


def test_two_entries_with_one_provider_id_are_refused_naming_both(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = two_instances(tmp_path / "p", 'provider = "runpod"\nid = "abc123"', 'provider = "runpod"\nid = "abc123"')
    lines = config.read_text().splitlines()
    first, second = lines.index("[instances.a]") + 1, lines.index('id = "abc123"', lines.index("[instances.b]")) + 1
    before = snapshot(tmp_path)
    err = one_line_error(capsys, "--report", str(tmp_path / "p"))
    assert f"rgt.toml:{second}: instances.b.id: names the same box as instances.a (line {first})" in err
    assert "'runpod'" in err and "'abc123'" in err
    assert snapshot(tmp_path) == before  # refused before the state database was created


def test_one_id_on_two_providers_is_two_boxes(tmp_path: Path) -> None:
    config = two_instances(tmp_path / "p", 'provider = "runpod"\nid = "abc123"', 'provider = "vastai"\nid = "abc123"')
    assert set(load_project(config).instances) == {"a", "b"}


def write_ssh_config(home: Path, text: str) -> None:
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(text)


@pytest.mark.parametrize(
    ("first", "second", "endpoint"),
    [
        ('provider = "ssh"\nhost = "alice@gpu.example.com"', 'provider = "ssh"\nhost = "bob@gpu.example.com:22"',
         "gpu.example.com:22"),
        ('provider = "ssh"\nhost = "gpu"', 'provider = "ssh"\nhost = "root@box.example.com:2222"',
         "box.example.com:2222"),
        ('provider = "ssh"\nhost = "gpu"', 'provider = "slurm"\nhost = "Box.Example.com:2222"',
         "box.example.com:2222"),
        ('provider = "slurm"\nhost = "login"', 'provider = "slurm"\nhost = "login.cluster.edu"',
         "login.cluster.edu:22"),
    ],
    ids=["user-differs", "alias-resolves", "slurm-login-node-is-the-ssh-box", "two-slurm-entries"],
)
def test_two_entries_reaching_one_ssh_box_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], first: str,
                                                      second: str, endpoint: str) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    write_ssh_config(home, "Host gpu\n  HostName BOX.example.com\n  Port 2222\n  User alice\n\n"
                     "Host login\n  HostName login.cluster.edu\n")
    config = two_instances(tmp_path / "p", first, second)
    load_project(config)  # the file itself is valid: where an alias goes is ssh config's answer
    lines = config.read_text().splitlines()
    line_a, line_b = lines.index("[instances.a]") + 1, lines.index("[instances.b]") + 1
    for args in (("--report", str(tmp_path / "p")), ("verify", "r1", str(tmp_path / "p")),
                 ("events", str(tmp_path / "p"))):
        err = one_line_error(capsys, *args)
        assert f"rgt.toml:{line_b}: instances.b: names the same box as instances.a (line {line_a})" in err
        assert f"both reach {endpoint}" in err


def test_distinct_ssh_boxes_and_ports_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    write_ssh_config(home, "Host gpu\n  HostName box.example.com\n  Port 2222\n")
    two_instances(tmp_path / "p", 'provider = "ssh"\nhost = "gpu"', 'provider = "ssh"\nhost = "box.example.com"')
    assert main(["events", str(tmp_path / "p")]) == 0, capsys.readouterr().err


# -- rgt init ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("provider", table.available())  # rgt init offers only these (test_init_providers.py)
def test_init_writes_a_template_that_loads_for_every_provider(tmp_path: Path, provider: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / f"my {provider} project"
    assert main(["init", str(folder), "--provider", provider]) == 0
    out = capsys.readouterr().out
    target = folder / "rgt.toml"
    assert f"wrote {target} (provider {provider})" in out
    project = load_project(target)
    assert project.instances["box"].provider == provider and "exp1" in project.runs
    # the commented launch example of a rentable provider is itself valid once uncommented
    text = target.read_text()
    if "# launch = " in text:
        target.write_text(text.replace("# launch = ", "launch = "))
        assert load_project(target).instances["box"].launch is not None


def test_init_never_overwrites_and_refuses_an_unknown_provider(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "p"), "--provider", "ssh"]) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)
    assert "already exists" in one_line_error(capsys, "init", str(tmp_path / "p"), "--provider", "sim")
    err = one_line_error(capsys, "init", str(tmp_path / "q"), "--provider", "aws")
    assert "--provider 'aws' is not a known provider" in err
    assert snapshot(tmp_path) == before and not (tmp_path / "q").exists()


# -- help texts ----------------------------------------------------------------------------------------------

def test_help_lists_every_verb_with_its_description(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rgt")
    for verb in VERBS:
        assert f"  {verb:<8} {VERB_HELP[verb]}" in out
    for verb in VERBS:
        assert main(["help", verb]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: rgt {verb}") and VERB_HELP[verb].split(",")[0] in " ".join(out.split())
    assert "invalid choice: 'bogus'" in one_line_error(capsys, "help", "bogus")


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_answers_help_with_its_description(tmp_path: Path, verb: str) -> None:
    result = rgt(verb, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: rgt {verb}")
    assert " ".join(VERB_HELP[verb].split()) in " ".join(result.stdout.split())
    assert list(tmp_path.iterdir()) == []  # help creates nothing (not even the demo folder)


def test_version_short_and_long(tmp_path: Path) -> None:
    short, long = rgt("-V", cwd=tmp_path), rgt("--version", cwd=tmp_path)
    assert short.returncode == 0 and short.stdout.startswith("rgt ")
    assert short.stdout == long.stdout


# -- --output never destroys the project ----------------------------------------------------------------------

@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    write_project(root)
    monkeypatch.chdir(root)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764417600")
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "r1" / "PULL_VERIFIED.json").write_text("{}")
    assert main(["events"]) == 0  # creates .rgt/state.db
    return root


@pytest.mark.parametrize(
    "output",
    ["rgt.toml", "./rgt.toml", "sub/../rgt.toml", ".rgt/state.db", ".rgt/new-report.txt", "runs/r1/PULL_VERIFIED.json",
     "runs/r1/report.txt", "runs/report.txt", "link-to-toml", "link-to-rgt/report.txt", "link-to-runs/r1/x"],
)
def test_output_never_writes_the_project_file_state_or_evidence(project: Path, output: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (project / "sub").mkdir()
    (project / "link-to-toml").symlink_to(project / "rgt.toml")
    (project / "link-to-rgt").symlink_to(project / ".rgt")
    (project / "link-to-runs").symlink_to(project / "runs")
    capsys.readouterr()
    before = snapshot(project)
    for force in ((), ("--force",)):
        err = one_line_error(capsys, "--report", "--output", output, *force)
        assert f"--output {output}: refused" in err
        assert snapshot(project) == before  # nothing written, no temp file left behind


def test_output_needs_force_to_replace_a_file_and_leaves_no_temp_file(project: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    target = project.parent / "report.txt"
    assert main(["--report", "--output", str(target)]) == 0
    first = target.read_text()
    assert first.startswith("rgt report")
    target.write_text("mine")
    err = one_line_error(capsys, "--report", "--output", str(target))
    assert "exists: add --force to replace it" in err and target.read_text() == "mine"
    assert main(["--report", "--format", "json", "--output", str(target), "--force"]) == 0
    assert target.read_text().startswith("{")
    assert sorted(p.name for p in project.parent.iterdir()) == ["proj", "report.txt"]  # no temp file left
    folder = project.parent / "a-folder"
    folder.mkdir()
    assert "is a folder" in one_line_error(capsys, "--report", "--output", str(folder), "--force")


def test_output_into_a_missing_folder_fails_in_one_line_and_writes_nothing(project: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(project.parent.iterdir())
    err = one_line_error(capsys, "--report", "--output", str(project.parent / "nope" / "r.txt"))
    assert "cannot write" in err
    assert sorted(project.parent.iterdir()) == before and not (project.parent / "nope").exists()
