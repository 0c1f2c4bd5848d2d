"""Programs rgt ships to the box on stdin (stdlib only, Python 3.8 syntax), and how they are sent."""

from __future__ import annotations

import base64
import json
from typing import Any


def program_stdin(name: str, params: dict[str, Any]) -> bytes:
    """The program's source with one PARAMS line in front: the parameters travel base64-encoded inside
    the program on stdin, so no run-derived string is ever spliced into a shell command."""
    import importlib.resources  # when a program is sent, not when the constants of one are read (config/notify.py)

    source = importlib.resources.files(__name__).joinpath(name).read_bytes()
    encoded = base64.b64encode(json.dumps(params, ensure_ascii=False).encode("utf-8")).decode("ascii")
    header = f'import base64, json; PARAMS = json.loads(base64.b64decode("{encoded}").decode())\n'
    return header.encode("ascii") + source
