"""Adding a provider is its implementation, its profile and one row of the provider table (providers/table.py,
issue 27 step 5): a throwaway provider that exists only in the tests (support/throwaway_provider.py, the sim
box's machinery under another name, with a profile written to a temp folder) is registered as one row, and then
rgt.toml accepts it, `rgt init` offers it and writes a template that loads, provider_for builds it, and the whole
arc runs through the real services: create, launch, liveness, pull, verify, gate, teardown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.registry import provider_for
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.project_files import init_project
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import INSTANCE, RUN, write_project
from support.throwaway_provider import NAME, PRICE, ThrowawayProvider, write_profile


@pytest.fixture
def throwaway(tmp_path: Path) -> Iterator[ProviderRow]:
    """The one row; taken out again afterwards, so no other test sees the provider."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    row = ProviderRow(NAME, "sim", "support.throwaway_provider:build",
                      options=MappingProxyType({"profile": str(write_profile(profiles))}))
    table.register(row)
    try:
        yield row
    finally:
        table.unregister(NAME)


def test_without_its_row_the_provider_is_unknown(tmp_path: Path) -> None:
    """The control: the same project, with nothing registered, is refused by name."""
    write_project(tmp_path, instance_body=f'provider = "{NAME}"')
    with pytest.raises(ConfigError, match=f"unknown provider '{NAME}'"):
        load_project(tmp_path / "rgt.toml")
    assert NAME not in table.names()


def test_the_table_refuses_a_second_row_of_one_name(throwaway: ProviderRow) -> None:
    with pytest.raises(ValueError, match="already in the table"):
        table.register(ProviderRow("sim", "sim", "support.throwaway_provider:build"))
    with pytest.raises(ValueError, match="ships with rgt"):
        table.unregister("sim")


def test_init_offers_the_new_provider_and_its_template_loads(tmp_path: Path, throwaway: ProviderRow) -> None:
    assert NAME in table.available()
    written = init_project(tmp_path / "fresh", NAME)
    text = written.read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if line.startswith(f'provider = "{NAME}"')]
    assert NAME in line.split("#", 1)[1] and "sim" in line.split("#", 1)[1]  # the list of what init offers
    assert load_project(written).instances["box"].provider == NAME


async def _finished(session: Session, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (state := await run_state(session, RUN)).liveness.state != "finished":
        assert asyncio.get_running_loop().time() < deadline, f"run {RUN} still {state.liveness}"
        await asyncio.sleep(0.1)


async def test_the_whole_arc_runs_through_a_provider_added_by_one_row(tmp_path: Path,
                                                                      throwaway: ProviderRow) -> None:
    write_project(tmp_path, instance_body=f'provider = "{NAME}"')
    project = load_project(tmp_path / "rgt.toml")
    built = provider_for(project.instances[INSTANCE], project.state_dir)
    assert isinstance(built, ThrowawayProvider) and built.profile.id == NAME

    session = Session(project)
    try:
        await create_instance(session, INSTANCE)
        status = await instance_status(session, INSTANCE)
        assert (status.provider, status.state, status.price_per_hour) == (NAME, "running", PRICE)
        await launch_run(session, RUN)
        await _finished(session)
        disk = tmp_path / ".rgt" / NAME / INSTANCE
        assert (disk / "workspace" / "rgt" / RUN / "seed0" / "best.pth").is_file()

        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open and any("PULL_VERIFIED" in reason for reason in plan.reasons)
        await pull_run(session, RUN)
        result = await verify_run(session, RUN)
        assert result.ok, result.errors
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open, plan.reasons

        outcome = await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
        assert outcome.confirmed and outcome.final_state == "terminated"
        assert not disk.exists()
        assert (tmp_path / "runs" / RUN / "PULL_VERIFIED.json").is_file()
        assert (await instance_status(session, INSTANCE)).state == "terminated"
    finally:
        session.close()
