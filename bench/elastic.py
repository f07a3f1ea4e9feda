"""An elastic resize's mechanism, run once for real with PyTorch (issue 40): a model and its optimizer sharded over 2
ranks, saved with PyTorch Distributed Checkpoint, loaded at 4 ranks; then, as a second part, the job side's own resize
1 -> 2 -> 1 node(s) (tests/frameworks/test_elastic_resize.py). A benchmark, not part of the suite; opt-in: PyTorch is
not part of the default setup (./platform test-frameworks makes .venv/frameworks, which has it).

Usage: ./platform bench elastic [--width N] [--no-resize] [--json]

Part 1, processes on this machine's CPU with gloo (one process a rank, no GPU):

- at 2 ranks: an MLP (256 -> N -> N -> 16, N = --width, default 1024) sharded with FSDP2 (``fully_shard``, every
  Linear and the root), AdamW, ``TRAIN_STEPS`` steps at a global batch of ``GLOBAL_BATCH`` (per-device batch
  ``PER_DEVICE``, so 2 ranks accumulate 2 batches a step); then ``get_state_dict(model, optimizer)`` (sharded: each rank
  its half of every parameter and of AdamW's moments) saved with ``torch.distributed.checkpoint.save``, timed
  (``REPEATS`` saves: the median and the range); then one more step at 2 ranks, its weights kept as the reference;
- at 4 ranks: the same model built from another seed (a load that does nothing fails the checks), sharded 4 ways, a
  fresh AdamW; ``get_state_dict``, ``torch.distributed.checkpoint.load``, ``set_state_dict`` for model and optimizer,
  timed (``REPEATS`` loads, each into a fresh model); checked: every model tensor and every optimizer state (step,
  exp_avg, exp_avg_sq) and hyperparameter equal, bit for bit, to the 2-rank state before the save (gathered full on
  both sides; pytorch/pytorch#91205, "dcp resharding does not work for optimizer state_dict", is the failure this
  looks for); then the same step at 4 ranks
  (accumulating 1 batch: the global batch kept, ``ml_platform_job.elastic.accumulation_steps``), whose weights must
  equal the 2-rank step's within ``STEP_ATOL`` (rtol 0): the gradient is the same mean over the same 16 samples, summed
  in another order (float32 rounding: about 1e-8 on the weights), and a step moves them by about the learning rate
  (1e-3), so a step on other samples, or none, cannot pass; the check also asks that the step moved them.

Part 2 (``--no-resize`` skips it): tests/frameworks/test_elastic_resize.py with pytest: the job side's resize (its
2-node attempt through the example's launcher script and torchrun on two "nodes"), exits 86, 86, 0, and the final
weights against an unresized run's.

Exit status: 0 when every check holds, 1 when one does not (or a process failed), 2 without PyTorch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ROOT / ".venv" / "frameworks"
FRAMEWORKS_PYTHON = FRAMEWORKS / "bin" / "python"
REEXEC_VARIABLE = "ML_PLATFORM_BENCH_ELASTIC_REEXEC"
SAVE_WORLD, LOAD_WORLD = 2, 4
PER_DEVICE, GLOBAL_BATCH = 4, 16  # 2 ranks accumulate 2 batches a step, 4 ranks 1
TRAIN_STEPS = 3  # AdamW steps before the save: its moments are not zero
IN_FEATURES, OUT_FEATURES = 256, 16
LR = 1e-3
STEP_ATOL = 1e-6
REPEATS = 3  # saves and loads timed: the median and the range (4 processes on 2 cores time noisily)
WORKER_TIMEOUT = 300
RESIZE_TEST = ROOT / "tests" / "frameworks" / "test_elastic_resize.py"


def ensure_torch(argv: list[str]) -> None:
    """PyTorch here, or this script again under the frameworks venv's Python, or one line and exit 2."""
    if importlib.util.find_spec("torch") is not None:
        return
    inside = Path(sys.prefix).resolve() == FRAMEWORKS.resolve()
    if FRAMEWORKS_PYTHON.exists() and not inside and not os.environ.get(REEXEC_VARIABLE):
        os.environ[REEXEC_VARIABLE] = "1"
        os.execv(str(FRAMEWORKS_PYTHON), [str(FRAMEWORKS_PYTHON), str(Path(__file__).resolve()), *argv])
    print("error: bench elastic needs PyTorch, which is opt-in (not in the default setup): run ./platform "
          "test-frameworks once (it makes .venv/frameworks with it), then this again", file=sys.stderr)
    raise SystemExit(2)


# --- the ranks (each a process of its own: python bench/elastic.py --worker PHASE --dir D) ------------------------
def build(width: int, seed: int) -> tuple[Any, Any]:
    """The MLP, sharded over the process group with FSDP2, and its AdamW."""
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, width), torch.nn.Tanh(), torch.nn.Linear(width, width),
                                torch.nn.Tanh(), torch.nn.Linear(width, OUT_FEATURES))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)


def train_step(model: Any, optimizer: Any, step: int) -> None:
    """Optimizer step ``step`` on samples [step x GLOBAL_BATCH, (step + 1) x GLOBAL_BATCH) of a fixed data set: rank r
    takes every world-size-th of them (as JobSampler does), in batches of PER_DEVICE, accumulating as many as keep the
    global batch (FSDP averages the gradients over the ranks)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from ml_platform_job.elastic import accumulation_steps

    rank, world = dist.get_rank(), dist.get_world_size()
    accumulate = accumulation_steps(GLOBAL_BATCH, PER_DEVICE, world)
    inputs = torch.randn((TRAIN_STEPS + 1) * GLOBAL_BATCH, IN_FEATURES, generator=torch.Generator().manual_seed(5))
    targets = torch.randn((TRAIN_STEPS + 1) * GLOBAL_BATCH, OUT_FEATURES, generator=torch.Generator().manual_seed(6))
    mine = list(range(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH))[rank::world]
    for batch in range(accumulate):
        index = mine[batch * PER_DEVICE:(batch + 1) * PER_DEVICE]
        (F.mse_loss(model(inputs[index]), targets[index]) / accumulate).backward()
    optimizer.step()
    optimizer.zero_grad()


def full_state(model: Any, optimizer: Any) -> tuple[dict, dict]:
    """Model and optimizer state gathered whole (every rank takes part; rank 0's copy is complete)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def slowest(seconds: float) -> float:
    """The slowest rank's seconds (the phase ends when every rank is done)."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def compare(left: Any, right: Any, where: str = "") -> tuple[float, list[str]]:
    """The largest absolute difference between two nested states' tensors, and where they differ otherwise (keys,
    shapes, plain values)."""
    import torch

    if isinstance(left, dict) and isinstance(right, dict):
        if set(left) != set(right):
            return float("inf"), [f"{where}: keys {sorted(map(str, set(left) ^ set(right)))[:4]} on one side only"]
        worst, notes = 0.0, []
        for key in left:
            difference, found = compare(left[key], right[key], f"{where}/{key}")
            worst, notes = max(worst, difference), notes + found
        return worst, notes
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        if len(left) != len(right):
            return float("inf"), [f"{where}: {len(left)} items against {len(right)}"]
        worst, notes = 0.0, []
        for index, (a, b) in enumerate(zip(left, right)):
            difference, found = compare(a, b, f"{where}[{index}]")
            worst, notes = max(worst, difference), notes + found
        return worst, notes
    if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
        if left.shape != right.shape:
            return float("inf"), [f"{where}: shape {tuple(left.shape)} against {tuple(right.shape)}"]
        return float((left.double() - right.double()).abs().max().item()) if left.numel() else 0.0, []
    return (0.0, []) if left == right else (float("inf"), [f"{where}: {left!r} against {right!r}"])


def worker(phase: str, directory: Path, width: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    checkpoint = str(directory / "dcp")
    result: dict[str, Any] = {"world": world}
    if phase == "save":
        model, optimizer = build(width, seed=0)
        for step in range(TRAIN_STEPS):
            train_step(model, optimizer, step)
        result["rows_per_rank"] = model[2].weight.to_local().shape[0]
        model_state, optimizer_state = get_state_dict(model, optimizer)
        result["save_seconds"] = []
        for repeat in range(REPEATS):  # the last one is the checkpoint the load reads
            dist.barrier()
            started = time.perf_counter()
            dcp.save({"model": model_state, "optim": optimizer_state},
                     checkpoint_id=checkpoint if repeat == REPEATS - 1 else f"{checkpoint}-{repeat}")
            result["save_seconds"].append(slowest(time.perf_counter() - started))
        before = full_state(model, optimizer)
        train_step(model, optimizer, TRAIN_STEPS)
        after = full_state(model, optimizer)
        if rank == 0:
            torch.save(before, directory / "before.pt")
            torch.save(after[0], directory / "after-2.pt")
    else:
        result["load_seconds"], result["restore_seconds"] = [], []
        for repeat in range(REPEATS):  # each into a model and optimizer fresh from another seed
            model, optimizer = build(width, seed=1)
            result["rows_per_rank"] = model[2].weight.to_local().shape[0]
            dist.barrier()
            started = time.perf_counter()
            model_state, optimizer_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optim": optimizer_state}
            reading = time.perf_counter()
            dcp.load(state, checkpoint_id=checkpoint)
            read = time.perf_counter() - reading
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
            result["restore_seconds"].append(slowest(time.perf_counter() - started))
            result["load_seconds"].append(slowest(read))
        loaded = full_state(model, optimizer)
        train_step(model, optimizer, TRAIN_STEPS)
        stepped = full_state(model, optimizer)[0]
        if rank == 0:
            before = torch.load(directory / "before.pt", weights_only=True)
            after = torch.load(directory / "after-2.pt", weights_only=True)
            result["model_difference"], result["model_notes"] = compare(loaded[0], before[0], "model")
            result["optimizer_difference"], result["optimizer_notes"] = compare(loaded[1], before[1], "optim")
            result["optimizer_states"] = sum(len(v) for v in before[1]["state"].values())
            result["tensors"] = len(before[0])
            result["step_difference"], result["step_notes"] = compare(stepped, after, "stepped")
            result["step_moved"] = compare(after, before[0], "moved")[0]
    if rank == 0:
        (directory / f"{phase}.json").write_text(json.dumps(result))
    dist.barrier()  # no rank tears the group down while another still uses it (gloo: SIGABRT at exit otherwise)
    dist.destroy_process_group()


# --- the parent -------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(phase: str, world: int, directory: Path, width: int) -> tuple[Optional[dict], str]:
    """``world`` processes of ``phase`` (a process group on 127.0.0.1): rank 0's result, or None and the failing
    rank's log's end."""
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "job"), os.environ.get("PYTHONPATH", "")])}
    processes = []
    for rank in range(world):
        log = open(directory / f"{phase}-rank-{rank}.log", "w")
        processes.append((subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", phase, "--dir", str(directory), "--width",
             str(width)], env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, stdout=log,
            stderr=subprocess.STDOUT), log))
    codes = []
    for process, log in processes:
        try:
            codes.append(process.wait(timeout=WORKER_TIMEOUT))
        except subprocess.TimeoutExpired:
            for other, _ in processes:
                other.kill()
            codes.append(None)
        log.close()
    failed = [rank for rank, code in enumerate(codes) if code != 0]
    if failed:
        tail = (directory / f"{phase}-rank-{failed[0]}.log").read_text()[-1500:]
        return None, f"{phase} at {world} ranks: rank {failed[0]} exited {codes[failed[0]]}:\n{tail}"
    return json.loads((directory / f"{phase}.json").read_text()), ""


def resize_part() -> dict:
    """tests/frameworks/test_elastic_resize.py under pytest: passed or not, seconds, the weights' largest difference."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "job"), str(ROOT)])}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "tests" / "frameworks" / "pytest.ini"),
                           str(RESIZE_TEST), "-q", "-s", "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    found = re.search(r"max \|resized - unresized\| = ([0-9.e+-]+)", done.stdout)
    return {"passed": done.returncode == 0, "seconds": round(time.monotonic() - started, 1),
            "difference": float(found[1]) if found else None,
            "tail": "" if done.returncode == 0 else (done.stdout + done.stderr)[-2000:]}


def seconds(values: list[float]) -> str:
    """The median of the timed repeats and their range."""
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.3f} s ({ordered[0]:.3f}-{ordered[-1]:.3f})"


def checks(save: dict, load: dict, resize: Optional[dict]) -> list[dict]:
    rows = [
        {"check": f"model after DCP {SAVE_WORLD}->{LOAD_WORLD} ranks ({load['tensors']} tensors)",
         "measured": f"max |diff| {load['model_difference']:.1e}", "target": "equal", "met":
         load["model_difference"] == 0 and not load["model_notes"], "notes": load["model_notes"]},
        {"check": f"AdamW state after reshard ({load['optimizer_states']} states)",
         "measured": f"max |diff| {load['optimizer_difference']:.1e}", "target": "equal", "met":
         load["optimizer_difference"] == 0 and not load["optimizer_notes"], "notes": load["optimizer_notes"]},
        {"check": f"a step at {LOAD_WORLD} ranks (acc. 1) = at {SAVE_WORLD} (acc. 2)",
         "measured": f"max |diff| {load['step_difference']:.1e}, moved {load['step_moved']:.1e}",
         "target": f"<= {STEP_ATOL:g}", "met": load["step_difference"] <= STEP_ATOL and not load["step_notes"]
         and load["step_moved"] > 100 * STEP_ATOL, "notes": load["step_notes"]},
        {"check": f"DCP save, {SAVE_WORLD} ranks ({save['rows_per_rank']} rows/rank of layer 2)",
         "measured": f"{seconds(save['save_seconds'])}, {save['megabytes']:.1f} MB", "target": "(timing)",
         "met": None},
        {"check": f"DCP load, {LOAD_WORLD} ranks ({load['rows_per_rank']} rows/rank of layer 2)",
         "measured": seconds(load["load_seconds"]), "target": "(timing)", "met": None},
        {"check": "get_state_dict + DCP load + set_state_dict",
         "measured": seconds(load["restore_seconds"]), "target": "(timing)", "met": None},
    ]
    if resize is not None:
        measured = f"{'passed' if resize['passed'] else 'FAILED'}, {resize['seconds']:.0f} s" + (
            f", max |diff| {resize['difference']:.1e}" if resize["difference"] is not None else "")
        rows.append({"check": "the job resized 1->2->1 nodes = unresized run", "measured": measured,
                     "target": "<= 1e-05", "met": resize["passed"], "notes": [resize["tail"]] if resize["tail"] else []})
    return rows


def table(rows: list[dict]) -> str:
    widths = [48, 34, 8, 3]  # 99 columns
    heads = ["check", "measured", "target", "met"]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for row in rows:
        met = "-" if row["met"] is None else "yes" if row["met"] else "NO"
        lines.append("  ".join(str(v).ljust(w) for v, w in zip((row["check"], row["measured"], row["target"], met),
                                                                   widths)).rstrip())
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="./platform bench elastic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1024,
                        help="the MLP's hidden width, a multiple of 4 from 16 to 8192 (default 1024: 1.3 M parameters)")
    parser.add_argument("--no-resize", action="store_true", help="skip part 2 (the 1->2->1 resize test)")
    parser.add_argument("--json", action="store_true", help="the results as JSON")
    parser.add_argument("--worker", choices=("save", "load"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 16 <= args.width <= 8192 or args.width % 4:
        parser.error(f"--width {args.width}: a multiple of 4 from 16 to 8192, e.g. --width 1024")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    ensure_torch(argv)
    if args.worker:
        sys.path.insert(0, str(ROOT / "job"))
        worker(args.worker, args.dir, args.width)
        return 0
    import torch

    progress = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="elastic-bench-") as name:
        directory = Path(name)
        print(f"bench elastic: torch {torch.__version__}, gloo on {os.cpu_count()} CPU cores; DCP "
              f"{SAVE_WORLD} -> {LOAD_WORLD} ranks (width {args.width})", file=progress, flush=True)
        save, error = run_ranks("save", SAVE_WORLD, directory, args.width)
        load = None
        if save is not None:
            save["megabytes"] = sum(f.stat().st_size for f in (directory / "dcp").rglob("*") if f.is_file()) / 1e6
            load, error = run_ranks("load", LOAD_WORLD, directory, args.width)
        if load is None:
            print(f"error: bench elastic: {error}", file=sys.stderr)
            return 1
        resize = None
        if not args.no_resize:
            print(f"bench elastic: the job's resize 1 -> 2 -> 1 ({RESIZE_TEST.relative_to(ROOT)})", file=progress,
                  flush=True)
            resize = resize_part()
    rows = checks(save, load, resize)
    ok = all(row["met"] is not False for row in rows)
    if args.json:
        print(json.dumps({"torch": torch.__version__, "cores": os.cpu_count(), "backend": "gloo",
                          "width": args.width, "save_world": SAVE_WORLD, "load_world": LOAD_WORLD,
                          "global_batch": GLOBAL_BATCH, "per_device_batch": PER_DEVICE, "step_atol": STEP_ATOL,
                          "save": save, "load": load, "resize": resize, "checks": rows, "ok": ok}, indent=2))
    else:
        print(table(rows))
        for row in rows:
            for note in row.get("notes") or ():
                print(f"  {row['check']}: {note}")
    return 0 if ok else 1


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from ops import terminal

    terminal.entry_point(main)
