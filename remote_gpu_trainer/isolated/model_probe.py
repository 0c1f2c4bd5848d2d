"""Model probe: the short program VERIFY's `probe` checks need run against the user's model (docs/verify.md §1),
in its own process, for V20 output_cosine, V22 input_spread, V27 train_eval_parity and V28 grad_coverage.

    <python> -I -B -m remote_gpu_trainer.isolated.model_probe CHECK --hook MOD:FN --root DIR --capsule DIR
    <python> -I -B <workdir>/.rgt/probe/model_probe.py CHECK ...   (the copy `rgt probe --on` pushes to the box,
                                                                with rgt_probe_stats.py beside it)

Stdout is exactly one JSON line: `{"ok": true, "check": "V20", "answer": {...}}` (exit 0), the answer's fields
exactly as the check's module docstring defines them (audits/catalogue/collapse.py, smoke.py), computed by the
checks' own numpy helpers; or `{"ok": false, "error": CODE, "detail": "..."}` (exit 1) with CODE one of
`hook_not_found`, `hook_failed` (the user's code raised), `bad_hook` (what it returned breaks the protocol
below), `nonfinite` (the answer holds NaN or inf), `probe_failed` (torch or numpy missing). Anything the user's
code prints goes to stderr, so it cannot corrupt the answer.

The loader hook (`[verify.probe] hook = "module:function"` in rgt.toml) is imported with DIR (the project root
here, the run's workdir on the box) first on sys.path, and called with the capsule folder as a pathlib.Path. It
returns a dict:

- `model` (V20, V27, V28): a torch.nn.Module with the capsule's weights, loaded by the hook itself, e.g.
  `model.load_state_dict(torch.load(capsule / "best.pth", map_location="cpu", weights_only=True))`. The probe
  never unpickles anything; while the hook runs, torch.load refuses weights_only=False (a checkpoint is
  untrusted input: a pickle may name any global and run it).
- `batch()` (V20, V22, V28): one batch of at least 16 distinct real inputs: a tensor, an (inputs, targets, ...)
  tuple or list, or a dict with `inputs`. V22 reads the raw inputs; V20 the outputs of `model(inputs)` in eval
  mode without gradients, or of the optional `outputs(model, batch)` (an embedding, say) when given.
- `train_inputs(n)` and `eval_inputs(n)` (V27): the same n = 8 items, in the same order, built by the training
  input path with augmentation off and by the evaluation path, as tensors with channels on axis 1.
- `evaluate(model, inputs)` (V27, optional): one step of the user's evaluation code; the probe records whether
  the model was in train mode when it was called (`model_training_in_eval`, null when not given).
- `loss(model, batch)` (V28): the training loss of `batch()` as a scalar tensor; the probe puts the model in
  train mode, calls backward once and counts the trainable tensors whose gradient is finite and not all zero.
- `optimizer` (V28, optional): the torch.optim.Optimizer training builds; its param groups must hold every
  trainable parameter (`not_in_optimizer`; without it nothing is reported there and `optimizer_checked` is false).

This module imports torch only inside functions and nothing of rgt but the checks' numpy helpers (from the
package when run with -m, else from the rgt_probe_stats.py pushed beside it), so it runs with the run's own
python on the box.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

CHECKS = ("V20", "V22", "V27", "V28")
MIN_DISTINCT = 16  # V20/V22: B >= 16 distinct inputs (docs/verify.md §2)
PARITY_ITEMS = 8  # V27: the same 8 items through both input paths
NEEDS: dict[str, tuple[str, ...]] = {
    "V20": ("model", "batch"), "V22": ("batch",), "V27": ("model", "train_inputs", "eval_inputs"),
    "V28": ("model", "batch", "loss"),
}
MAX_DETAIL = 500


class ProbeFailure(Exception):
    """The probe cannot answer; `code` says whose fault (the hook's, the protocol's, the environment's)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = " ".join(detail.split())[:MAX_DETAIL]


# -- the numpy helpers of the checks themselves --------------------------------------------------------------
def stats() -> Any:
    """The checks' own helpers (output_cosine_stats, input_spread_stats, parity_stats, grad_coverage_stats):
    the probe and the check can then never disagree on what a field means."""
    if __package__:
        from remote_gpu_trainer.audits.catalogue import collapse, smoke

        return argparse.Namespace(output_cosine_stats=collapse.output_cosine_stats,
                                  input_spread_stats=collapse.input_spread_stats,
                                  parity_stats=smoke.parity_stats, grad_coverage_stats=smoke.grad_coverage_stats)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # -I leaves the script's folder off sys.path
    import rgt_probe_stats  # type: ignore[import-not-found, unused-ignore]

    return rgt_probe_stats


# -- the user's hook ------------------------------------------------------------------------------------------
def load_hook(spec: str, root: str) -> Callable[[Path], Any]:
    """`module:function` imported with `root` first on sys.path; a missing module or function is
    hook_not_found, a module that raises while importing is hook_failed."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ProbeFailure("hook_not_found", f"hook {spec!r} is not module:function")
    sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ProbeFailure("hook_not_found", f"hook {spec}: no module {module_name!r} under {root}") from None
        raise ProbeFailure("hook_failed", f"hook {spec}: importing {module_name} failed: {_said(exc)}") from None
    except BaseException as exc:  # noqa: BLE001 - the user's module: whatever it raises is reported
        raise ProbeFailure("hook_failed", f"hook {spec}: importing {module_name} raised {_said(exc)}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ProbeFailure("hook_not_found", f"hook {spec}: {module_name} has no function {function_name!r}")
    return function


def call(label: str, function: Any, *args: Any) -> Any:
    """One call into the user's code; anything it raises becomes hook_failed naming the call."""
    if not callable(function):
        raise ProbeFailure("bad_hook", f"the hook's {label} is not callable")
    try:
        return function(*args)
    except ProbeFailure:
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's code: whatever it raises is reported
        raise ProbeFailure("hook_failed", f"{label} raised {_said(exc)}") from None


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def guard_torch_load() -> None:
    """torch.load with weights_only=True only, for as long as the user's code runs in this process."""
    import torch

    original = torch.load

    def weights_only_load(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("weights_only") is False:
            raise ProbeFailure("hook_failed", "torch.load(weights_only=False) refused: the probe loads "
                                              "checkpoints with weights_only=True only")
        kwargs["weights_only"] = True
        return original(*args, **kwargs)

    torch.load = weights_only_load


def bundle_of(hook: Callable[[Path], Any], capsule: str, check: str) -> Mapping[str, Any]:
    """The hook's dict, with what `check` needs present (and the model a torch.nn.Module)."""
    import torch

    bundle = call("the hook", hook, Path(capsule))
    if not isinstance(bundle, Mapping):
        raise ProbeFailure("bad_hook", f"the hook returned {type(bundle).__name__}, not a dict")
    missing = [key for key in NEEDS[check] if bundle.get(key) is None]
    if missing:
        raise ProbeFailure("bad_hook", f"{check} needs {', '.join(missing)} in the hook's dict "
                                       f"(it gave {', '.join(sorted(map(str, bundle))) or 'nothing'})")
    if "model" in NEEDS[check] and not isinstance(bundle["model"], torch.nn.Module):
        raise ProbeFailure("bad_hook", f"the hook's model is {type(bundle['model']).__name__}, not a torch.nn.Module")
    return bundle


# -- tensors --------------------------------------------------------------------------------------------------
def inputs_of(batch: Any) -> Any:
    """The input tensor of a batch: the tensor itself, the first item of a tuple or list, or `inputs`."""
    import torch

    found = batch
    if isinstance(batch, Mapping):
        found = batch.get("inputs")
    elif isinstance(batch, (list, tuple)) and batch:
        found = batch[0]
    if not isinstance(found, torch.Tensor):
        raise ProbeFailure("bad_hook", "batch() must give a tensor, an (inputs, targets) tuple or a dict with "
                                       f"inputs; its inputs are {type(found).__name__}")
    return found


def first_tensor(value: Any, label: str) -> Any:
    """A model's output as one tensor: itself, the first tensor of a tuple/list, or of a dict's values."""
    import torch

    items = list(value.values()) if isinstance(value, Mapping) else value
    if isinstance(items, (list, tuple)):
        items = next((item for item in items if isinstance(item, torch.Tensor)), None)
    if not isinstance(items, torch.Tensor):
        raise ProbeFailure("bad_hook", f"{label} gave {type(value).__name__}, not a tensor")
    return items


def rows(tensor: Any) -> Any:
    """A tensor as a float64 numpy array [B, D] (B on axis 0)."""
    array = tensor.detach().to("cpu").double().numpy()
    if array.ndim == 0:
        raise ProbeFailure("bad_hook", "a batch must have its items on axis 0, not be a scalar")
    return array.reshape(array.shape[0], -1)


def distinct_inputs(inputs: Any) -> Any:
    """The inputs as [B, D] rows, refused when fewer than MIN_DISTINCT of them differ."""
    import numpy as np

    data = rows(inputs)
    distinct = int(np.unique(data, axis=0).shape[0]) if data.size else 0
    if distinct < MIN_DISTINCT:
        raise ProbeFailure("bad_hook", f"batch() gave {data.shape[0]} inputs, {distinct} distinct: the probe "
                                       f"needs at least {MIN_DISTINCT} distinct real inputs")
    return data


# -- the four answers -----------------------------------------------------------------------------------------
def output_cosine(bundle: Mapping[str, Any], helpers: Any) -> dict[str, Any]:
    """V20: c and spread of the model's outputs over one batch of distinct inputs, in eval mode."""
    import torch

    batch = call("batch()", bundle["batch"])
    inputs = inputs_of(batch)
    distinct_inputs(inputs)
    model = bundle["model"]
    model.eval()
    with torch.no_grad():
        produced = (call("outputs(model, batch)", bundle["outputs"], model, batch) if bundle.get("outputs")
                    is not None else call("model(inputs)", model, inputs))
    outputs = rows(first_tensor(produced, "the model"))
    if outputs.shape[0] != inputs.shape[0]:
        raise ProbeFailure("bad_hook", f"{inputs.shape[0]} inputs gave {outputs.shape[0]} output rows")
    c, spread = helpers.output_cosine_stats(outputs)
    return {"batch": int(outputs.shape[0]), "mean_cosine": float(c), "spread": float(spread)}


def input_spread(bundle: Mapping[str, Any], helpers: Any) -> dict[str, Any]:
    """V22: c and the spread ratio of the raw input vectors of one batch."""
    data = distinct_inputs(inputs_of(call("batch()", bundle["batch"])))
    c, ratio = helpers.input_spread_stats(data)
    return {"batch": int(data.shape[0]), "mean_cosine": float(c), "spread_ratio": float(ratio)}


def train_eval_parity(bundle: Mapping[str, Any], helpers: Any) -> dict[str, Any]:
    """V27: the same items through both input paths, the model's mode during evaluation, untracked BatchNorms."""
    import torch

    model = bundle["model"]
    untracked = [name or "(model)" for name, module in model.named_modules()
                 if isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
                 and module.num_batches_tracked is not None and int(module.num_batches_tracked) == 0]
    train = call(f"train_inputs({PARITY_ITEMS})", bundle["train_inputs"], PARITY_ITEMS)
    eval_ = call(f"eval_inputs({PARITY_ITEMS})", bundle["eval_inputs"], PARITY_ITEMS)
    for label, tensor in (("train_inputs", train), ("eval_inputs", eval_)):
        if not isinstance(tensor, torch.Tensor):
            raise ProbeFailure("bad_hook", f"{label}({PARITY_ITEMS}) gave {type(tensor).__name__}, not a tensor")
    answer = helpers.parity_stats(train.detach().to("cpu").double().numpy(),
                                  eval_.detach().to("cpu").double().numpy())
    answer["model_training_in_eval"] = (training_during(model, bundle["evaluate"], eval_)
                                        if bundle.get("evaluate") is not None else None)
    answer["bn_untracked"] = untracked
    return dict(answer)


def training_during(model: Any, evaluate: Any, inputs: Any) -> bool:
    """Whether the model was in train mode at any forward call the user's evaluation step made."""
    import torch

    seen: list[bool] = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(bool(module.training)))
    try:
        with torch.no_grad():
            call("evaluate(model, inputs)", evaluate, model, inputs)
    finally:
        handle.remove()
    if not seen:
        raise ProbeFailure("bad_hook", "evaluate(model, inputs) never called the model")
    return any(seen)


def grad_coverage(bundle: Mapping[str, Any], helpers: Any) -> dict[str, Any]:
    """V28: one forward and backward in train mode; which trainable tensors got a usable gradient."""
    import numpy as np
    import torch

    model = bundle["model"]
    model.train()
    model.zero_grad(set_to_none=True)
    batch = call("batch()", bundle["batch"])
    loss = call("loss(model, batch)", bundle["loss"], model, batch)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
        raise ProbeFailure("bad_hook", "loss(model, batch) must give a scalar tensor that requires grad")
    call("loss.backward()", loss.backward)
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    # Each gradient reduced to one value with the same verdict under the helper's test (finite, not all zero):
    # copying every gradient to numpy would double the model's memory.
    grads = {name: None if p.grad is None else np.array(
        [float("nan") if not bool(torch.isfinite(p.grad).all()) else float(bool(p.grad.any()))])
        for name, p in named}
    optimizer = bundle.get("optimizer")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ProbeFailure("bad_hook", f"the hook's optimizer is {type(optimizer).__name__}, not a torch optimizer")
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]} if optimizer else set()
    names = {name for name, p in named if id(p) in stepped} if optimizer else set(grads)
    answer = dict(helpers.grad_coverage_stats(grads, names))
    answer["optimizer_checked"] = optimizer is not None
    return answer


ANSWERS: dict[str, Callable[[Mapping[str, Any], Any], dict[str, Any]]] = {
    "V20": output_cosine, "V22": input_spread, "V27": train_eval_parity, "V28": grad_coverage,
}


def probe(check: str, hook_spec: str, root: str, capsule: str) -> dict[str, Any]:
    """The JSON object the probe prints for one check of one capsule."""
    try:
        try:
            import numpy  # noqa: F401
            import torch
        except ImportError as exc:
            raise ProbeFailure("probe_failed", f"{sys.executable} cannot import {exc.name}: the probe needs "
                                               "torch and numpy") from None
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        helpers = stats()
        guard_torch_load()  # before the hook's module is imported: it may bind torch.load to a name of its own
        hook = load_hook(hook_spec, root)
        answer = ANSWERS[check](bundle_of(hook, capsule, check), helpers)
    except ProbeFailure as failure:
        return {"ok": False, "error": failure.code, "detail": failure.detail}
    return {"ok": True, "check": check, "answer": answer}


def encode(result: Mapping[str, Any]) -> str:
    """One JSON line; an answer holding NaN or inf is itself a failure (strict JSON has no such numbers)."""
    try:
        return json.dumps(result, sort_keys=True, allow_nan=False)
    except ValueError:
        return json.dumps({"ok": False, "error": "nonfinite", "detail": "the answer holds NaN or infinity: the "
                                                                        "model's inputs or outputs are not finite"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="model_probe", description="answer one VERIFY probe check")
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument("--hook", required=True, metavar="MODULE:FUNCTION")
    parser.add_argument("--root", required=True, help="the folder the hook's module is imported from")
    parser.add_argument("--capsule", required=True, help="the capsule folder the hook is called with")
    args = parser.parse_args(argv)
    # Stdout carries only the answer: whatever the user's code prints (Python or C) goes to stderr instead.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = probe(args.check, args.hook, args.root, args.capsule)
    out.write(encode(result) + "\n")
    out.flush()
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
