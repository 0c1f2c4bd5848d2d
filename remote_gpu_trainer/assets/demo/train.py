"""rgt demo job: a small MLP on seeded synthetic data, on the CPU, about half a minute per cell.

It behaves like a real training script on a rented box: it logs step/loss/lr lines, writes a checkpoint
every epoch, keeps best.pth and best_metrics.json, and writes complete.json only after everything else is
safely on disk. Every file is written to a temporary name, fsynced and renamed, so a reader never sees half
a checkpoint. This file is copied into the demo project and pushed to the (simulated) box; it is not part
of rgt itself and imports only torch and the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import torch
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cell", required=True, help="roster cell id, e.g. seed0 (the digits are the seed)")
    parser.add_argument("--out", required=True, help="output folder for this cell")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=40)
    parser.add_argument("--step-delay", type=float, default=0.12, help="seconds per step, to look like a GPU job")
    parser.add_argument("--lr", type=float, default=3e-3)
    return parser.parse_args()


def seed_of(cell: str) -> int:
    digits = re.findall(r"\d+", cell)
    return int(digits[-1]) if digits else 0


def atomic_write(path: Path, data: bytes) -> None:
    temp = path.with_name(f".rgt-tmp-{path.name}")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def atomic_save(obj: object, path: Path) -> None:
    temp = path.with_name(f".rgt-tmp-{path.name}")
    torch.save(obj, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)


def synthetic_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)  # the task is the same for every seed
    weights = torch.randn(16, 1, generator=generator)
    features = torch.randn(2048, 16, generator=generator)
    targets = torch.tanh(features @ weights) + 0.1 * torch.randn(2048, 1, generator=generator)
    return features[:1536], targets[:1536], features[1536:], targets[1536:]


def main() -> int:
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seed = seed_of(args.cell)
    torch.manual_seed(seed)
    train_x, train_y, val_x, val_y = synthetic_data(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    total_steps = args.epochs * args.steps_per_epoch
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(total_steps, 1))
    loss_fn = nn.MSELoss()
    batch = 64
    step = 0
    best: dict[str, float | int] | None = None
    print(f"cell={args.cell} seed={seed} epochs={args.epochs} steps_per_epoch={args.steps_per_epoch}", flush=True)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for _ in range(args.steps_per_epoch):
            index = torch.randint(0, train_x.shape[0], (batch,))
            loss = loss_fn(model(train_x[index]), train_y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            lr = scheduler.get_last_lr()[0]
            print(f"epoch={epoch} step={step}/{total_steps} loss={loss.item():.6f} lr={lr:.6g}", flush=True)
            if args.step_delay > 0:
                time.sleep(args.step_delay)
        model.eval()
        with torch.no_grad():
            val_loss = loss_fn(model(val_x), val_y).item()
        print(f"epoch={epoch} step={step}/{total_steps} val_loss={val_loss:.6f}", flush=True)
        state = {
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "epoch": epoch,
            "step": step,
            "metrics": {"val_loss": val_loss},
        }
        atomic_save(state, out / f"epoch_{epoch:03d}.pth")
        print(f"saved checkpoint epoch_{epoch:03d}.pth", flush=True)
        if best is None or val_loss < float(best["val_loss"]):
            best = {"val_loss": val_loss, "epoch": epoch, "step": step, "seed": seed}
            atomic_save(state, out / "best.pth")
            metrics = json.dumps(best, indent=2, sort_keys=True) + "\n"
            atomic_write(out / "best_metrics.json", metrics.encode())
            print(f"new best val_loss={val_loss:.6f} at epoch={epoch}", flush=True)
    summary = {"cell": args.cell, "seed": seed, "epochs": args.epochs, "steps": step, "best": best}
    atomic_write(out / "complete.json", (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
    print(f"cell {args.cell} complete: best val_loss={best['val_loss'] if best else 'n/a'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
