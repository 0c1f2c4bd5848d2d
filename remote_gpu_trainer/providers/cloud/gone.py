"""Is a cloud instance gone? Decided here and only here, by the profile's `gone_when` rules.

A destroy reply is never proof (docs/providers.md §0): only the provider's own later word counts, and which
words count is a fact of the profile (`[control.api] gone_when`), not of the code. CloudProvider.get asks
this module after a read that found nothing, and its shown_state before it reports a `terminated` that a
client's state table mapped (no rule: `terminating`); the clients' wait_gone asks it after every poll. The rules:

- `http:<code>`: the read answered that status (a 404 the provider documents as "no such instance").
- `null:<field>`: the read answered 200 with the instance field null (vast.ai's `instances: null`; the
  client reports that answer as a CloudNotFound that is not a 404).
- `status:<word>`: the read answered with that state word (`destroyed`, `terminated`).
- `absent:list`: the account's instance list no longer has it. Asked only when the read was not
  conclusive: a not-found no other rule trusts (Paperspace), or a state word the provider also uses for
  a live instance (vast.ai's `exited`, which a merely stopped instance says too).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.providers.cloud.http import CloudNotFound
from remote_gpu_trainer.providers.cloud.types import CloudInstance

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.cloud.client import CloudClient


@dataclass(frozen=True)
class Gone:
    """The decision: `rule` is the gone_when rule that says the instance is gone (None: not gone, or not
    provably); `instance` is what the provider last showed of it (None when it showed nothing)."""

    rule: str | None
    instance: CloudInstance | None = None

    @property
    def gone(self) -> bool:
        return self.rule is not None


def not_found_rule(rules: Sequence[str], exc: CloudNotFound) -> str | None:
    """The rule a not-found answer satisfies: its HTTP status, or (for a 200 naming no instance) a null rule."""
    if f"http:{exc.status}" in rules:
        return f"http:{exc.status}"
    if exc.status != 404:
        return next((rule for rule in rules if rule.startswith("null:")), None)
    return None


def status_rule(rules: Sequence[str], instance: CloudInstance) -> str | None:
    """The rule the instance's own state word satisfies (compared without case)."""
    word = f"status:{instance.raw_state.lower()}"
    return next((rule for rule in rules if rule.lower() == word), None)


def shown_state(rules: Sequence[str], instance: CloudInstance) -> tuple[str, str | None]:
    """The state `get` may report for an instance the provider still shows, and why when it had to differ:
    a `terminated` that a client's state table mapped counts only under a gone_when rule, else it is
    `terminating` (the meter keeps running until the provider's own word says it is gone)."""
    if instance.state != "terminated" or status_rule(rules, instance) is not None:
        return instance.state, None
    return "terminating", f"none: the profile's gone_when rules do not count {instance.raw_state!r} as gone"


async def decide_gone(client: CloudClient, rules: Sequence[str], provider_id: str,
                      answer: CloudInstance | CloudNotFound, recheck_words: Collection[str] = ()) -> Gone:
    """Gone or not, after one read of the instance (`answer`: what it returned, or the not-found it raised).

    `recheck_words` are the provider's state words that also describe a live instance: they are settled
    by the list (absent:list). A failing list call raises its CloudAPIError: no answer is not an answer.
    """
    if isinstance(answer, CloudNotFound):
        rule = not_found_rule(rules, answer)
        return Gone(rule) if rule else await _by_list(client, rules, provider_id, None)
    rule = status_rule(rules, answer)
    if rule:
        return Gone(rule, answer)
    if answer.raw_state.lower() in recheck_words:
        return await _by_list(client, rules, provider_id, answer)
    return Gone(None, answer)


async def _by_list(client: CloudClient, rules: Sequence[str], provider_id: str,
                   read: CloudInstance | None) -> Gone:
    """absent:list, when the profile trusts it: gone once the account's list lacks the id."""
    if "absent:list" not in rules:
        return Gone(None, read)
    listed = {instance.provider_id: instance for instance in await client.list_instances()}
    if provider_id not in listed:
        return Gone("absent:list", read)
    return Gone(None, read or listed[provider_id])
