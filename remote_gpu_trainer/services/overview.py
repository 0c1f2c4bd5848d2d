"""The one data model: what the dashboard panels and every `--report` format render (remote_gpu_trainer.views).

If the TUI shows it, the report can print it: both take an Overview built here, and neither computes
anything of its own beyond layout.
"""

from __future__ import annotations
