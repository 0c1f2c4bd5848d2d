"""rgt demo job: a small MLP classifying seeded synthetic items (4 classes), on the CPU, about 15 s a cell.

It behaves like a real training script on a rented box: it checks its data against the split manifest
(every item's sha256), logs step/loss/lr lines, writes a checkpoint every epoch, keeps best.pth (selected on
the validation split), evaluates it once on the test split, and writes its evidence through rgt_capsule
(run.json, config.yaml, train.csv, test/main/metrics.json and per-item results.csv), then complete.json
last. This file is copied into the demo project and pushed to the (simulated) box with rgt_capsule.py, the
data pack and the split manifest; it is not part of rgt itself and imports only torch, rgt_capsule and the
standard library.

`--flaw last-checkpoint` plants the bug rgt demo --flawed asks the user to find: the test evaluation loads
the last epoch's file while the run records the best one as evaluated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

# Fewer differences between machines: torch's generic kernels instead of the ones picked for this CPU's vector
# width, MKL's CPU-independent code path, and one thread (sums in one order). This narrows, but does not close,
# the gap: the trained bytes still differ between CPUs (an AVX-512 machine and one without give different
# checkpoints), so nothing may expect them to be the same bytes everywhere. Each setting can be overridden
# from the environment; the first log line names the ATen CPU capability the run used.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import rgt_capsule  # type: ignore[import-not-found]  # noqa: E402  # pushed beside this script (remote/rgt_capsule.py)
import torch  # noqa: E402
from torch import nn  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cell", required=True, help="roster cell id, e.g. seed0 (the digits are the seed)")
    parser.add_argument("--out", required=True, help="output folder for this cell")
    parser.add_argument("--run-id", default="demo")
    parser.add_argument("--data", default="demo_data.json", help="the data pack: every item's file, by split")
    parser.add_argument("--splits", default="demo.json", help="the split manifest the pack must match")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=40)
    parser.add_argument("--step-delay", type=float, default=0.08, help="seconds per step, to look like a GPU job")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--flaw", choices=("none", "last-checkpoint"), default="none")
    return parser.parse_args()


def seed_of(cell: str) -> int:
    digits = re.findall(r"\d+", cell)
    return int(digits[-1]) if digits else 0


def atomic_save(obj: object, path: Path) -> None:
    temp = path.with_name(f".rgt-tmp-{path.name}")
    torch.save(obj, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)


def load_split(pack_path: str, manifest_path: str) -> dict[str, list[tuple[str, list[float], int]]]:
    """The items by split, each checked against the manifest's sha256 of its file's bytes."""
    pack = json.loads(Path(pack_path).read_text(encoding="utf-8"))
    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    expected = {m["id"]: m["sha256"] for rows in manifest["members"].values() for m in rows}
    splits: dict[str, list[tuple[str, list[float], int]]] = {}
    for split, rows in pack["members"].items():
        for item_id, text in rows:
            if hashlib.sha256(text.encode("utf-8")).hexdigest() != expected.get(item_id):
                raise SystemExit(f"{item_id}: its bytes do not match the split manifest")
            record = json.loads(text)
            splits.setdefault(split, []).append((item_id, record["x"], int(record["y"])))
    return splits


def tensors(rows: list[tuple[str, list[float], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([r[1] for r in rows]), torch.tensor([r[2] for r in rows])


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy, the predicted classes and each item's own cross-entropy."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
    per_item = nn.functional.cross_entropy(logits, y, reduction="none")
    return per_item.mean().item(), logits.argmax(dim=1), per_item


def train(args: argparse.Namespace, out: Path, cap: rgt_capsule.Capsule,
          splits: dict[str, list[tuple[str, list[float], int]]]) -> tuple[nn.Module, dict[str, float]]:
    train_x, train_y = tensors(splits["train"])
    val_x, val_y = tensors(splits["val"])
    model = nn.Sequential(nn.Linear(train_x.shape[1], 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    total_steps = args.epochs * args.steps_per_epoch
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(total_steps, 1))
    step, best = 0, {"val_acc": -1.0, "epoch": 0, "step": 0}
    for epoch in range(1, args.epochs + 1):
        model.train()
        for index_in_epoch in range(args.steps_per_epoch):
            index = torch.randint(0, train_x.shape[0], (64,))
            loss = nn.functional.cross_entropy(model(train_x[index]), train_y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            lr = scheduler.get_last_lr()[0]
            print(f"epoch={epoch} step={step}/{total_steps} loss={loss.item():.6f} lr={lr:.6g}", flush=True)
            if index_in_epoch < args.steps_per_epoch - 1:  # the epoch's last row carries the validation too
                cap.log_step(step=step, epoch=epoch, loss=loss.item(), lr=lr)
            if args.step_delay > 0:
                time.sleep(args.step_delay)
        val_loss, predicted, _ = evaluate(model, val_x, val_y)
        val_acc = (predicted == val_y).float().mean().item()
        print(f"epoch={epoch} step={step}/{total_steps} val_loss={val_loss:.6f} val_acc={val_acc:.4f}", flush=True)
        cap.log_step(step=step, epoch=epoch, loss=loss.item(), lr=lr, val={"loss": val_loss, "acc": val_acc})
        state = {"model_state_dict": model.state_dict(), "epoch": epoch, "step": step,
                 "metrics": {"val_loss": val_loss, "val_acc": val_acc}}
        atomic_save(state, out / "last.pth")
        cap.checkpoint("last", str(out / "last.pth"), epoch=epoch, step=step)
        print(f"saved checkpoint last.pth (epoch {epoch})", flush=True)
        if val_acc > best["val_acc"]:
            best = {"val_acc": val_acc, "val_loss": val_loss, "epoch": epoch, "step": step}
            atomic_save(state, out / "best.pth")
            cap.checkpoint("best", str(out / "best.pth"), epoch=epoch, step=step)
            print(f"new best val_acc={val_acc:.4f} at epoch={epoch}", flush=True)
    return model, best


def main() -> int:
    args = parse_args()
    out = Path(args.out)
    seed = seed_of(args.cell)
    torch.manual_seed(seed)
    splits = load_split(args.data, args.splits)
    config = {"model": {"hidden": 64, "classes": 4}, "num_classes": 4, "optimizer": {"name": "adamw", "lr": args.lr},
              "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch, "batch": 64, "seed": seed,
              "loss": "ce", "data": {"pack": args.data, "splits": args.splits}}
    cap = rgt_capsule.Capsule(str(out), run_id=args.run_id, cell=args.cell, config=config, seed=seed,
                              task="classification", split_manifest=args.splits, dataset="rgt-demo-synthetic",
                              argv=["python"] + sys.argv)  # every setting is in config.yaml: no overrides
    print(f"cell={args.cell} seed={seed} epochs={args.epochs} steps_per_epoch={args.steps_per_epoch} "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()}", flush=True)
    model, best = train(args, out, cap, splits)
    evaluated = out / ("last.pth" if args.flaw == "last-checkpoint" else "best.pth")
    model.load_state_dict(torch.load(evaluated, weights_only=True)["model_state_dict"])
    test_x, test_y = tensors(splits["test"])
    _, predicted, per_item = evaluate(model, test_x, test_y)
    rows = zip(splits["test"], predicted.tolist(), per_item.tolist(), strict=True)
    items = [{"item_id": item_id, "target": int(target), "pred": int(pred), "acc": float(int(pred) == int(target)),
              "nll": float(nll)} for (item_id, _, target), pred, nll in rows]
    accs = [float(int(p) == int(t)) for p, t in zip(predicted.tolist(), test_y.tolist(), strict=True)]
    nlls = [float(v) for v in per_item.tolist()]
    test_acc, test_nll = sum(accs) / len(accs), sum(nlls) / len(nlls)  # the columns' means, as VERIFY V29 re-derives
    cap.write_test("main", split="test", items=items, checkpoint="best", evaluated=str(evaluated),
                   metrics={"acc": (test_acc, "higher_is_better", "mean", "acc"),
                            "nll": (test_nll, "lower_is_better", "mean", "nll")}, protocol_id="demo-acc-v1")
    cap.close(selection={"criterion": "val_acc", "split": "val", "direction": "higher_is_better",
                         "epoch": best["epoch"], "step": best["step"], "value": best["val_acc"]},
              training={"world_size": 1, "per_device_batch": 64, "grad_accum": 1, "effective_batch": 64,
                        "epochs": args.epochs, "steps": args.epochs * args.steps_per_epoch, "precision": "fp32"})
    summary = {"cell": args.cell, "seed": seed, "best": best, "test_acc": test_acc}
    (out / "complete.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"cell {args.cell} complete: best val_acc={best['val_acc']:.4f}, test acc={test_acc:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
