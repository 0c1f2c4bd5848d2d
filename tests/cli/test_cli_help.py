"""`rgt --help`, `rgt help VERB` and shell completion, run as a user runs them: the installed module in its
own process. All three come from one parser, so every verb must show up in each."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from remote_gpu_trainer.cli.parser import VERB_HELP, VERBS
from support.helpers import run_rgt

# written out here, not read from the parser: a verb dropped from VERBS must fail this file
EXPECTED_VERBS = {"demo", "init", "info", "up", "push", "run", "watch", "pull", "verify", "down", "tick",
                  "audit", "finding", "probe", "accept", "events", "trust", "capsule", "splits", "completion", "help",
                  "build", "reconcile", "completeness", "status", "adopt", "mcp", "approve", "reject", "skill",
                  "recover"}
OPTIONS_OF = {"down": ("--confirm", "--stop", "--accept-loss"),
              "watch": ("--once", "--interval", "--format", "--all", "--notify", "--progress-every"),
              "verify": ("--format",), "pull": ("--format",), "events": ("--run", "--format"),
              "info": ("--format",), "up": ("--approve-price",), "run": ("--ack", "--rerun"),
              "audit": ("--check", "--strict", "--format"),
              "finding": ("--ack", "--waive", "--fixed", "--reopen", "--note", "--disclosure", "--scope"),
              "probe": ("--cell", "--here", "--on", "--format"),
              "accept": ("--on", "--here", "--compare", "--format"),
              "capsule": ("--write", "--force"),
              "status": ("--all", "--timeout", "--format"),
              "splits": ("--split", "--split-list", "--csv", "--jsonl", "--hash-unit", "--fields", "--method"),
              "recover": ("--approve", "--revoke", "--format")}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_verbs_are_the_expected_ones_each_with_a_description_and_an_example() -> None:
    from remote_gpu_trainer.cli.parser import VERB_EXAMPLES

    assert set(VERBS) == EXPECTED_VERBS and len(VERBS) == len(EXPECTED_VERBS)
    for verb in VERBS:
        assert VERB_HELP[verb].strip() and "\n" not in VERB_HELP[verb]
        assert all(example.startswith(f"rgt {verb}") for example in VERB_EXAMPLES[verb]), verb


def test_main_help_lists_every_verb_with_its_description(tmp_path: Path) -> None:
    result = run_rgt("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rgt")
    listed = result.stdout.split("verbs (rgt VERB --help, or rgt help VERB):", 1)[1].splitlines()
    described = {line.split()[0]: line.split(None, 1)[1] for line in listed if line.strip()}
    assert set(described) == EXPECTED_VERBS
    for verb, description in described.items():
        assert description == VERB_HELP[verb]


@pytest.mark.parametrize("verb", sorted(EXPECTED_VERBS))
def test_help_verb_prints_that_verbs_help_with_its_description_and_example(tmp_path: Path, verb: str) -> None:
    result = run_rgt("help", verb, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: rgt {verb}")
    assert flat(VERB_HELP[verb]) in flat(result.stdout)
    example = result.stdout.split("\nexample:\n", 1)[1]
    assert example.lstrip().startswith(f"rgt {verb}")
    for option in OPTIONS_OF.get(verb, ()):
        assert option in result.stdout
    assert list(tmp_path.iterdir()) == []  # help writes nothing


def test_help_of_an_unknown_verb_is_a_one_line_usage_error(tmp_path: Path) -> None:
    result = run_rgt("help", "bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert "invalid choice: 'bogus'" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_mentions_every_verb_and_their_options(tmp_path: Path, shell: str) -> None:
    result = run_rgt("completion", shell, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    for verb in EXPECTED_VERBS:
        assert verb in script, verb
    for options in OPTIONS_OF.values():
        for option in options:
            assert option.lstrip("-") in script, option
    same = run_rgt("--print-completion", shell, cwd=tmp_path)
    assert same.returncode == 0 and same.stdout == script
    interpreter = shutil.which(shell)
    if interpreter is not None and shell != "tcsh":  # the script must at least parse in its shell
        (tmp_path / "script").write_text(script)
        checked = subprocess.run([interpreter, "-n", str(tmp_path / "script")], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_bash_completion_completes_the_verbs_and_a_verbs_options(tmp_path: Path) -> None:
    """The bash script, loaded into a real bash: `rgt ` offers every verb, `rgt down --` offers --confirm."""
    bash = shutil.which("bash") or "bash"
    script = tmp_path / "rgt.bash"
    script.write_text(run_rgt("completion", "bash", cwd=tmp_path).stdout)
    probe = (f"source {script}\n"
             "complete_words() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 )); COMP_LINE=\"$*\"; "
             "COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _shtab_rgt; printf '%s\\n' \"${COMPREPLY[@]}\"; }\n"
             "complete_words rgt ''\necho ---\ncomplete_words rgt down --\n")
    result = subprocess.run([bash, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    verbs, options = result.stdout.split("---\n")
    assert set(verbs.split()) >= EXPECTED_VERBS
    assert {"--confirm", "--stop"} <= set(options.split())


def test_completion_of_an_unknown_shell_is_a_usage_error(tmp_path: Path) -> None:
    result = run_rgt("completion", "fish", cwd=tmp_path)
    assert result.returncode == 2 and "invalid choice: 'fish'" in result.stderr
