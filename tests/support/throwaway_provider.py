"""A provider that exists only in the tests (tests/providers/test_provider_table.py): it is added to rgt through
the provider table alone, one row, to show that a new provider needs its implementation, its profile and that
row, and no edit anywhere else. It reuses the simulated box's machinery under its own name, folder and profile."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from remote_gpu_trainer.clock import Clock
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.providers.sim import SimProvider
from remote_gpu_trainer.providers.table import ProviderRow

NAME = "throwaway"
PRICE = 0.41  # per hour, not the sim profile's: the meter must read this profile


class ThrowawayProvider(SimProvider):
    """A simulated box under another name: its disks live in .rgt/throwaway/, its billing facts come from the
    profile file its row names (a profile loads from any path, not only the shipped ones)."""

    name = NAME

    def __init__(self, box_dir: Path, clock: Clock, profile: Path) -> None:
        super().__init__(box_dir, clock)
        self.profile = load_profile(profile)


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> ThrowawayProvider:
    """The row's builder, as providers/registry.py calls every builder."""
    return ThrowawayProvider(state_dir / NAME, clock, Path(row.options["profile"]))


def write_profile(folder: Path) -> Path:
    """The shipped sim profile under this provider's id, name and price, written as a file in `folder`."""
    text = resources.files("remote_gpu_trainer").joinpath("assets/profiles/sim.toml").read_text(encoding="utf-8")
    changes = (('id = "sim"', f'id = "{NAME}"'),
               ('display_name = "Simulated rental (demo)"', 'display_name = "Throwaway rental (tests)"'),
               ("compute_per_hour = 0.89", f"compute_per_hour = {PRICE}"))
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / f"{NAME}.toml"
    path.write_text(text, encoding="utf-8")
    return path
