"""A run's network environment profile as wrapper lines (docs/remote-ops.md §12).

`runs.<id>.network = "china"` makes the job wrapper export the profile's variables (assets/networks/china.toml:
the Hugging Face mirror, the pip index), point the HF/torch/pip caches at folders under the run's `cache_dir`
(default `<workdir>/.cache`, on the data disk with the work rather than on a small system disk), and, only when
the box's environment has a proxy set, add loopback and the mirror hosts to `no_proxy`/`NO_PROXY`, so a
whitelist proxy never sees traffic it would break. Only the run's own environment changes: nothing on the box is
edited, and the values are rgt's data, each quoted.
"""

from __future__ import annotations

import shlex

from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.networks import load_network
from remote_gpu_trainer.providers.base import Transport

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def cache_root(run: RunConfig) -> str:
    return run.cache_dir or f"{run.workdir.rstrip('/')}/.cache"


def wrapper_lines(run: RunConfig, transport: Transport) -> list[str]:
    """The wrapper's export lines for the run's network profile; none without one."""
    if run.network is None:
        return []
    profile = load_network(run.network)
    q = shlex.quote
    lines = [f"# network profile {profile.id} (docs/remote-ops.md §12): this job's environment only"]
    lines += [f"export {name}={q(value)}" for name, value in profile.env]
    folders = []
    for name, folder in profile.caches:
        path = q(transport.resolve(f"{cache_root(run).rstrip('/')}/{folder}"))
        lines.append(f"export {name}={path}")
        folders.append(path)
    if folders:
        lines.append(f"mkdir -p {' '.join(folders)} 2>/dev/null || true")
    hosts = ",".join(profile.no_proxy_hosts())
    proxies = "".join(f"${{{name}:-}}" for name in PROXY_VARS)
    lines += [
        f'if [ -n "{proxies}" ]; then',
        '  nop="${no_proxy:-${NO_PROXY:-}}"',
        f'  export no_proxy="${{nop:+$nop,}}"{q(hosts)} NO_PROXY="${{nop:+$nop,}}"{q(hosts)}',
        "fi",
    ]
    return lines
