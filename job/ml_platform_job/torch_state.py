"""Every random generator a training process draws from, saved and put back, and a digest of a model's state
(torch and NumPy where installed; nothing here imports them before the job has). The states are tensors and plain
Python values, so ``torch.load(weights_only=True)`` reads them back.

Lightning (``fabric/utilities/seed.py``) and Hugging Face (``rng_state.pth``) keep the same four: Python's ``random``,
NumPy's global generator, torch's CPU generator and each CUDA device's. ``set_rng_state`` tolerates a missing key (a
checkpoint from a job without NumPy) and a changed CUDA device count (a retry on another instance type: the CUDA
states are then left seeded, and the function says so in its return value).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any, Mapping


def rng_state() -> dict[str, Any]:
    """The state of every generator this process has loaded."""
    state: dict[str, Any] = {"python": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # plain values, so that torch.load(weights_only=True) takes it (Lightning's default)
        kind, keys, position, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (str(kind), [int(k) for k in keys], int(position), int(has_gauss), float(cached))
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> list[str]:
    """Puts back what ``rng_state`` saved; returns the generators it could not (with why)."""
    skipped = []
    if "python" in state:
        python = state["python"]
        random.setstate((python[0], tuple(python[1]), python[2]) if isinstance(python, list) else python)
    numpy = sys.modules.get("numpy")
    if "numpy" in state:
        if numpy is None:
            import numpy  # type: ignore[import-not-found, no-redef]
        kind, keys, position, has_gauss, cached = state["numpy"]
        numpy.random.set_state((kind, numpy.asarray(keys, dtype=numpy.uint32), position, has_gauss, cached))
    torch = sys.modules.get("torch")
    if "torch" in state and torch is not None:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch is not None:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(state["cuda"]):
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
            skipped.append(f"cuda: saved for {len(state['cuda'])} device(s), this host has {devices}: left as seeded")
    return skipped


def state_digest(state: Any) -> str:
    """SHA-256 over a model's (or any state dict's) tensors, names, shapes and dtypes, in name order: two runs with
    the same digest ended with the same weights, bit for bit. A module is read through its ``state_dict()``; plain
    values (numbers, lists, dicts) through their JSON."""
    if hasattr(state, "state_dict") and callable(state.state_dict):
        state = state.state_dict()
    digest = hashlib.sha256()
    _update(digest, state, "")
    return digest.hexdigest()


def _update(digest: Any, value: Any, name: str) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _update(digest, value[key], f"{name}.{key}" if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _update(digest, item, f"{name}[{index}]")
    else:
        digest.update(f"{name}={json.dumps(value, sort_keys=True, default=repr)};".encode())
