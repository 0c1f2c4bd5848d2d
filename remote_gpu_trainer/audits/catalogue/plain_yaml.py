"""YAML from an untrusted box, read as plain data (docs/verify.md §5).

The safe loader never runs code, but YAML anchors and aliases still let a few hundred bytes name a structure of
billions of nodes ("billion laughs"): the loader shares them, every walk over the config (V01 flattens it) would
not. Evidence has no use for them, so a document that uses an alias is refused with a reason, like a malformed
one. libyaml's loader is used when PyYAML was built with it (ten times faster on a config).
"""

from __future__ import annotations

from typing import Any


class YamlRefused(ValueError):
    """The bytes are not a plain YAML document; the message says why, in one line."""


def load_plain(data: bytes) -> Any:
    """The document in `data`, or YamlRefused (malformed, not UTF-8, or using an alias)."""
    import yaml

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlRefused(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # an alias is written *name and an anchor &name: a text with neither has no alias, and the events pass
        # (a second parse, half the cost of reading a config) would find none
        if ("*" in text or "&" in text) and any(isinstance(event, yaml.AliasEvent)
                                                for event in yaml.parse(text, Loader=loader)):
            raise YamlRefused("uses YAML aliases (*name): evidence must be plain data")
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, C or Python
    except yaml.YAMLError as exc:
        raise YamlRefused(f"malformed YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
