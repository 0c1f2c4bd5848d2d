"""JSON nested deeper than Python's recursion limit, from the box: a finding or a refusal, never a crash.

100,000 nested `[` is a few hundred kilobytes a box can write anywhere rgt reads JSON: a metrics file,
the manifest, the environment survey's answer, the torch line of the phase-0 audit, a provider's error body.
Each is fed to the real reader through its real caller.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.env_audit import torch_facts
from remote_gpu_trainer.audits.manifest import parse_manifest
from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.cloud.http import provider_message
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from remote_gpu_trainer.services.launch.env_audit import parse_survey_output
from remote_gpu_trainer.strict_json import loads_strict
from support.evidence_helpers import Env, keep_probe_verdicts, make_env, write_run

DEPTH = 100_000
DEEP_LIST = "[" * DEPTH + "]" * DEPTH
DEEP_OBJECT = '{"a":' * DEPTH + "1" + "}" * DEPTH


def test_the_nesting_really_is_beyond_pythons_json() -> None:
    """Without the strict reader's guard these texts end in RecursionError, which no caller catches."""
    for text in (DEEP_LIST, DEEP_OBJECT):
        with pytest.raises(RecursionError):
            json.loads(text)


@pytest.mark.parametrize("text", [DEEP_LIST, DEEP_OBJECT, '{"x": ' + DEEP_LIST + "}"], ids=["list", "object", "inner"])
def test_the_strict_reader_turns_deep_nesting_into_its_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_strict(text)
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_strict(text.encode())
    assert loads_strict('{"a": [[[1]]]}') == {"a": [[[1]]]}  # ordinary nesting still reads


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    made = make_env(tmp_path)
    write_run(made.box)
    yield made
    keep_probe_verdicts(made)


async def test_deeply_nested_best_metrics_is_metrics_invalid(env: Env) -> None:
    (env.box / "seed0" / "best_metrics.json").write_text(DEEP_LIST, encoding="utf-8")
    await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db)
    assert not result.ok
    invalid = [e for e in result.errors if e.code == "metrics_invalid"]
    assert [e.path for e in invalid] == ["seed0/best_metrics.json"]
    assert "nested too deeply" in invalid[0].detail
    assert not (env.local / "PULL_VERIFIED.json").exists()


def manifest_with(files: str) -> bytes:
    return ('{"schema": "rgt-pull-manifest/v1", "run_id": "exp1", "files": ' + files + "}").encode()


@pytest.mark.parametrize("data", [DEEP_LIST.encode(), DEEP_OBJECT.encode(), manifest_with(DEEP_LIST)],
                         ids=["list", "object", "in-files"])
def test_a_deeply_nested_manifest_is_problems_not_an_exception(data: bytes) -> None:
    manifest, problems = parse_manifest(data, roster=("seed0",), run_id="exp1")
    assert manifest is None
    assert problems and "nested too deeply" in problems[0].detail


def test_a_deeply_nested_probe_answer_is_a_refusal() -> None:
    with pytest.raises(TransportError, match="nested too deeply"):
        parse_survey_output(DEEP_LIST.encode())


def test_a_deeply_nested_torch_line_is_a_failed_row_reason() -> None:
    facts = {"torch": {"rc": 0, "out": "RGT_TORCH=" + DEEP_LIST}, "args": {"python": "python3"}}
    info, why = torch_facts(facts)
    assert info is None and "exited 0" in why


@pytest.mark.parametrize("body", [DEEP_LIST, '{"error": ' + DEEP_OBJECT + "}", '{"errors": ' + DEEP_LIST + "}"],
                         ids=["list", "error-object", "errors-list"])
def test_a_deeply_nested_provider_error_body_gives_a_message(body: str) -> None:
    text = provider_message(body.encode())
    assert isinstance(text, str) and len(text) <= 300
    shallow = "[" * 500 + '"quota exceeded"' + "]" * 500  # parses, but is far deeper than any real error
    assert provider_message(shallow.encode()) == ""
    assert provider_message(b'{"error": {"message": "quota exceeded"}}') == "quota exceeded"
