"""Errors that carry the CLI exit code of docs/architecture.md §3.1, so every face reports them the same way."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3


def internal_error(exc: BaseException) -> str:
    """One line for a failure rgt has no words for (a bug): its kind and its text. What a loop over many
    projects says of one of them, so that the others still get their lines."""
    return f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"


class RgtError(Exception):
    """A one-line, user-facing error: what went wrong, where, and how to fix it."""

    exit_code = EXIT_FAILED


class ConfigError(RgtError):
    """Usage or configuration problem (exit 2)."""

    exit_code = EXIT_USAGE


class VerbFailed(RgtError):
    """The verb ran and failed, e.g. verification found problems (exit 1)."""

    exit_code = EXIT_FAILED


class GateRefused(RgtError):
    """The teardown gate refused (exit 3); `reasons` lists every failed condition."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, reasons: list[str], hint: str = "") -> None:
        super().__init__(message)
        self.reasons = reasons
        self.hint = hint  # what the person could do about it (e.g. the --accept-loss names), printed last


class TransportError(RgtError):
    """The far side could not be reached or answered badly: liveness becomes `unknown`, never `dead`."""

    exit_code = EXIT_FAILED


class HostKeyNotTrusted(TransportError):
    """First contact with a box whose host key no known_hosts file lists: refused before any login. The SSH
    transport raises it (HostKeyUnknown) without knowing which rgt.toml entry it was reaching; once that is known
    (services/instances.trust_command), `said` words the refusal with the exact command that trusts the key."""

    def __init__(self, where: str, key_type: str, fingerprint_sha256: str, then: str) -> None:
        self.where = where
        self.key_type = key_type
        self.fingerprint_sha256 = fingerprint_sha256
        super().__init__(self.said(then))

    def said(self, then: str) -> str:
        return (f"{self.where}: unknown host key {self.key_type} {self.fingerprint_sha256}: nothing was sent; "
                f"compare it with the provider's console, then {then}")


class HostKeyChanged(TransportError):
    """The box presented a host key other than the recorded one (the SSH transport raises it): nothing
    was sent, and a pull names it as the reason its files failed."""


class StateError(ConfigError):
    """The state database cannot be used (damaged, unreadable, or written by a newer rgt): exit 2, and
    nothing that needs it (the teardown gate first) can proceed."""
