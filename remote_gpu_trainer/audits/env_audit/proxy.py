"""Row 17 of the environment audit (docs/remote-ops.md §4, §12): a proxy set on the box without `no_proxy`
entries for loopback and the run's mirror hosts.

Why it matters: behind the great firewall boxes often carry a whitelist proxy (AutoDL's network_turbo,
Gpushare's turbo). Without `no_proxy`, traffic to 127.0.0.1 (a local rendezvous, TensorBoard, an evaluation
server) and to the domestic mirrors goes through it and fails or crawls. The survey reports only the names of the
proxy variables set, never their values, which may hold a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from remote_gpu_trainer.audits.env_audit.common import PASS, SKIPPED, WARN, RunRequirements
from remote_gpu_trainer.views import AuditRow


def no_proxy_entries(block: Mapping[str, Any]) -> list[str]:
    """The entries of `no_proxy` and `NO_PROXY` together, lower case (commas or spaces between them)."""
    text = ",".join(str(block.get(key) or "") for key in ("no_proxy", "NO_PROXY"))
    return [entry.strip().lower() for entry in re.split(r"[,\s]+", text) if entry.strip()]


def covered(host: str, entries: Sequence[str]) -> bool:
    """`host` bypasses the proxy: listed, `*`, or under a listed domain (`.example.com` or `example.com`)."""
    host = host.lower()
    return any(entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip("."))
               for entry in entries)


def proxy_row(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    block = facts.get("proxy")
    if not isinstance(block, Mapping):
        return AuditRow(17, "proxy", SKIPPED, "not in the probe output")
    names = [name for name in block.get("set") or () if isinstance(name, str)]
    if not names:
        return AuditRow(17, "proxy", PASS, "no proxy set")
    missing = [host for host in req.no_proxy_hosts if not covered(host, no_proxy_entries(block))]
    if missing:
        return AuditRow(17, "proxy", WARN, f"{', '.join(names)} set, but no_proxy lacks {', '.join(missing)}: "
                        "loopback and mirror traffic goes through the proxy (the run's network profile adds them "
                        "for the job itself, docs/remote-ops.md §12)")
    return AuditRow(17, "proxy", PASS, f"{', '.join(names)} set; no_proxy covers {', '.join(req.no_proxy_hosts)}")
