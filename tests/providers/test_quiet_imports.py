"""Nothing is printed that the user did not cause: importing rgt's SSH transport prints no library warning
(asyncssh makes cryptography 47+ warn about DSA at import; providers/transports/quiet_asyncssh.py)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_ssh_transport_prints_nothing() -> None:
    for module in ("ssh", "ssh_pool", "ssh_hostkeys"):
        done = subprocess.run([sys.executable, "-c", f"import remote_gpu_trainer.providers.transports.{module}"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "" and done.stdout == "", (module, done.stderr)

