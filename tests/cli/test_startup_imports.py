"""What a sim project's `rgt --report` and `rgt --version` load (docs/architecture.md §2, heavy imports are lazy).

asyncssh (with its crypto) and httpx each cost more to import than the report takes to build; a project without
SSH or cloud instances must not pay for them, and `--version` loads no verb module. Read from `-X importtime`
of a real process, so an eager import anywhere on the path fails the test with the chain that brought it in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("asyncssh", "httpx", "torch", "textual")


def imported(argv: list[str], cwd: Path) -> dict[str, str]:
    """Top-level package name -> the importtime line that first loaded it, for one real rgt process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "remote_gpu_trainer", *argv], cwd=cwd,
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found: dict[str, str] = {}
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            found.setdefault(name.split(".")[0], line)
            found.setdefault(name, line)
    return found


def test_the_report_of_a_sim_project_loads_no_ssh_http_torch_or_textual(project_dir: Path) -> None:
    loaded = imported(["--report", str(project_dir)], project_dir)
    assert "remote_gpu_trainer.services.overview" in loaded  # the report really ran through the services
    assert [name for name in HEAVY if name in loaded] == []
    # issue 29: the report's own budget (docs/architecture.md §5): the registry's lock is flock(2), not the filelock
    # package (~9 ms of imports), the load checks (isolated interpreter, package metadata) load with `rgt verify`,
    # the sentinel's HTTP stack (config/notify.py reads its limits) with its first delivery, and the log's
    # detector (and VERIFY's integrity module, for the saves a line claims) with the first log line to look at;
    # rgt.toml's reader takes reconcile's name rules, not its model; the inbox's views load with a first request;
    # the assets are read by path, not through importlib.resources (tempfile, zipfile); the load check program
    # loads when a marker is written, and the key scrubber (every profile's key names) with a log's first news;
    # recovery's ledger only for a run with `recover` limits
    assert [name for name in REPORT_LAZY if name in loaded] == []


REPORT_LAZY = ("filelock", "remote_gpu_trainer.services.evidence.load_checks", "http.client", "urllib.request",
               "remote_gpu_trainer.audits.log.detector", "remote_gpu_trainer.audits.catalogue.reconcile.model",
               "remote_gpu_trainer.audits.catalogue.integrity", "remote_gpu_trainer.request_views",
               "importlib.resources", "zipfile", "tempfile", "remote_gpu_trainer.isolated.load_check",
               "remote_gpu_trainer.providers.cloud.credentials", "remote_gpu_trainer.services.recover")


def test_version_loads_no_verb_module_and_no_session(project_dir: Path) -> None:
    loaded = imported(["--version"], project_dir)
    assert "remote_gpu_trainer.cli.main" in loaded
    verbs = [name for name in loaded if name.startswith("remote_gpu_trainer.cli.") and name.endswith("_verbs")]
    assert verbs == [] and "remote_gpu_trainer.services.session" not in loaded


def test_the_report_reads_capsules_without_pandas_scipy_or_matplotlib(project_dir: Path) -> None:
    """Results first (docs/deliver.md §8) reads run.json, metrics.json and train.csv with json and csv; a project
    without runs/ does not even load the reader."""
    from support.capsules import write_evidence
    from support.results import three_seeds

    before = imported(["--report", str(project_dir)], project_dir)
    assert "remote_gpu_trainer.deliver.results" not in before
    three_seeds(project_dir)
    write_evidence(project_dir, [])
    loaded = imported(["--report", str(project_dir), "--format", "json"], project_dir)
    assert {"remote_gpu_trainer.deliver.results", "remote_gpu_trainer.services.deliver.claim_views"} <= loaded.keys()
    assert "remote_gpu_trainer.services.deliver.build" not in loaded  # the claims alone: no figure or table judged
    assert "remote_gpu_trainer.audits.catalogue.generated" not in loaded  # rows read as stored, not computed again
    assert [name for name in ("pandas", "scipy", "numpy", "matplotlib", "pyarrow", *HEAVY) if name in loaded] == []


# what the dashboard imports only when its action is first asked for (issue 29: start-up, docs/architecture.md §5)
LAZY_IN_TUI = ("remote_gpu_trainer.services.evidence.verbs", "remote_gpu_trainer.services.fleet.auto_follow",
               "remote_gpu_trainer.services.deliver.build", "remote_gpu_trainer.widgets.background_plot",
               "remote_gpu_trainer.screens.approvals", "remote_gpu_trainer.services.teardown")
DASHBOARD_WITH_DATA = """
import json, sys
from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.services.opening import open_session

class Shown(RgtApp):
    def on_mount(self):  # textual calls RgtApp.on_mount as well: one dashboard, as `rgt` shows
        self.set_interval(0.01, self.check_data)

    def check_data(self):
        if isinstance(self.screen, DashboardScreen) and self.screen.overview is not None:
            self.call_after_refresh(self.exit)

Shown(open_session(sys.argv[1], read_only=True)).run(headless=True, size=(120, 40))
print(json.dumps(sorted(name for name in sys.argv[2:] if name in sys.modules)))
"""


def test_the_dashboard_draws_its_data_without_loading_pull_follow_ups_or_the_deliver_build(
        project_dir: Path) -> None:
    """The dashboard's first frame with the services' data on a sim project: what p, v, b or a finished run's
    follow-up need is not loaded yet, nor torch."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TEXTUAL")}
    result = subprocess.run([sys.executable, "-c", DASHBOARD_WITH_DATA, str(project_dir), *LAZY_IN_TUI, "torch"],
                            cwd=project_dir, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
