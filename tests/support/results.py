"""A run with three seeds whose results are exact in binary, for the results-first tests (docs/deliver.md §8):
acc 0.5, 0.75, 1.0 (mean 0.75, sample std 0.25), err = 1 - acc (↓), n = 4 items, val/acc and loss curves."""

from __future__ import annotations

from pathlib import Path

from support.capsules import write_capsule

ACC = (0.5, 0.75, 1.0)
# per seed: the val/acc curve (its best, then a drop) and the loss curve
VAL_ACC = ((0.25, 0.5, 0.375), (0.5, 0.75, 0.625), (0.75, 1.0, 0.875))
LOSS = ((1.0, 0.5, 0.75), (2.0, 1.0, 1.5), (3.0, 1.5, 2.25))
WALL_S = 50.5 * 3600  # first created_at 2026-06-20T10:00Z to last closed_at 2026-06-22T12:30Z


def three_seeds(root: Path, run_id: str = "r1", tracker: str | None = None) -> None:
    """Run `run_id`: seeds 0-2 of test `main` with `acc` (↑, a val/acc curve) and `err` (↓, no val/ column:
    best and last come from the loss); `tracker` is recorded as seed0's provenance.tracker.url."""
    for seed in range(3):
        train = [{"step": 100 * (i + 1), "epoch": i + 1, "loss": LOSS[seed][i], "lr": 0.001,
                  "val/acc": VAL_ACC[seed][i]} for i in range(3)]
        record: dict[str, object] = {"created_at": f"2026-06-2{seed}T10:00:00Z",
                                     "closed_at": f"2026-06-2{seed}T12:30:00Z"}
        if tracker is not None and seed == 0:
            record["provenance"] = {"tracker": {"backend": "wandb", "url": tracker}}
        write_capsule(root, run_id, f"seed{seed}", seed=seed, metrics={"acc": ACC[seed], "err": 1 - ACC[seed]},
                      directions={"err": "lower_is_better"}, n=4, train=train, record=record)
