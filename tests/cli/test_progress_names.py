"""The pull and verify bar shows file names from the box as text: `[/]big.bin` or `[blink reverse]x` is a name,
never Rich markup (which raised MarkupError in the bar's thread, or turned on blinking)."""

from __future__ import annotations

import pytest

from remote_gpu_trainer.cli import printers
from remote_gpu_trainer.services.evidence.verify import VerifyStep


@pytest.mark.parametrize("name", ["seed0/[/]big.bin", "seed0/[blink reverse]x.pth", "seed0/[bold]"])
def test_a_file_name_in_the_bar_is_shown_as_written(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with printers._bar() as bar:
        step = printers.VerifyBar(bar, bar.add_task("verify", total=None))
        step(VerifyStep(f"hashing {name} (1/1)", name, 0, 100))
    err = capsys.readouterr().err
    assert f"hashing {name} (1/1)" in err and "\x1b[5" not in err
