"""The key=value gate (metrics.KV_GATE) lets the parser skip KV on lines it cannot match: it must never skip a
line KV matches, or a metric silently disappears. Checked on hand-picked edge cases and on generated lines
drawn from the characters the two patterns care about."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remote_gpu_trainer.audits.log.metrics import KV, KV_GATE, MetricParser

# keys ending in letters, 1-5 digits, `.`/`/`/`-`; blanks before the separator; both separators; every kind of
# value start (sign, dot, digit, nan/inf in any case, Unicode digits and case-folding letters)
EDGES = [
    "loss=0.5", "loss = 0.5", "loss:\t0.5", "top1=0.9", "acc10=0.9", "acc100=1", "acc1000=1", "acc12345=1",
    "val/loss=-1e-3", "it/s=5.41", "x.y=.5", "a-b=+2", "lr=nan", "lr=NaN", "lr=-inf", "lr=+Infinity",
    "k=\u0663", "k\u0663=1", "k\u00b2=1", "loss\u00e9=1", "step 12/600", "a=\u0130nf", "a=\u0131nf",
]
NOT_KV = ["[2026-11-29 10:05:00] INFO data: loaded shard 5 (12 samples) from /data/shards/00005.tar",
          "12:30:45 tick", "loss=abc", "1=2", "ratio 3:4"]


def test_the_gate_passes_every_edge_case_kv_matches_and_skips_chatter() -> None:
    assert all(KV.findall(line) for line in EDGES[:-3])  # the edge cases really are matches
    assert [line for line in EDGES if KV.findall(line) and not KV_GATE.search(line)] == []
    assert [line for line in NOT_KV[:2] if KV_GATE.search(line)] == []  # chatter is skipped after one scan
    assert [line for line in NOT_KV if KV.findall(line)] == []


ALPHABET = st.sampled_from(list("aZ_9017 \t=:./-+eEnNaIifty,x\u0663\u00b2\u0130\u0131[]()%|{}'"))


@settings(max_examples=3000, deadline=None)
@given(st.text(ALPHABET, max_size=40))
def test_the_gate_never_skips_a_line_kv_matches(line: str) -> None:
    assert not KV.findall(line) or KV_GATE.search(line) is not None


@settings(max_examples=1000, deadline=None)
@given(st.text(ALPHABET, max_size=40))
def test_the_parser_never_raises_on_generated_lines(line: str) -> None:
    MetricParser().feed(line, 0.0)


def test_a_dotted_capital_i_is_not_infinity() -> None:
    """`İnf` once matched the non-finite alternative under Unicode case folding, and float() then raised."""
    assert MetricParser().feed("step=3 loss=\u0130nf", 0.0)[0].key == "step"
    assert [(s.key, s.value) for s in MetricParser().feed("step=3 loss=inf", 0.0)] == [("loss", float("inf"))]
