"""Data that resumes exactly: which samples an epoch trains on, in which order, and with which random draws, as
functions of (seed, epoch, sample) alone (torch).

Why not the DataLoader's own ``shuffle=True`` and ``generator``: the order then depends on how often the generator
was drawn from, and torch draws the workers' base seed from it each time an iterator is created, which with
``persistent_workers=True`` is once per loader, not once per epoch. A resumed attempt creates its iterator once more
than an uninterrupted one, so its order, its workers' seeds and its model differ (measured: max weight difference
0.058 on MNIST), even with every generator's state saved. So here:

- ``JobSampler`` (a ``DistributedSampler``: Lightning does not replace it) draws each epoch's permutation from
  ``seed + epoch`` (as ``DistributedSampler`` does) and starts a resumed epoch at its data position: a global sample
  counter, the samples all ranks trained in the epoch, so a stop mid-epoch resumes mid-epoch, at any world size.
- ``SeededSamples`` seeds Python's, NumPy's and torch's CPU generators before each sample from (seed, epoch, index),
  in whichever worker loads it: random augmentation is the same on every attempt, with any ``num_workers`` and
  persistent workers or not. In the main process (``num_workers=0``) the generators are put back after the sample,
  so the training step's own draws (dropout) are untouched.
- The loader gets a generator of its own, so creating its iterator never draws from torch's global generator (it
  would otherwise shift every later draw of the step: dropout).
"""

from __future__ import annotations

import hashlib
import random
import sys
from typing import Any, Iterator, Optional

import torch  # type: ignore[import-not-found]
from torch.utils.data import Dataset, DistributedSampler, IterableDataset, get_worker_info  # type: ignore

from .stop import rank as _rank, world_size as _world_size


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one sample's random draws: the first 8 bytes of SHA-256(seed:epoch:index)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{epoch}:{index}".encode()).digest()[:8], "big") >> 1


class JobSampler(DistributedSampler):
    """One rank's sample indices for an epoch, from ``seed + epoch`` alone, starting at the epoch's data position
    (``set_position``). Yields ``(epoch, index)`` pairs for ``SeededSamples`` when ``tagged`` (``TrainingJob.loader``
    pairs the two), plain indices otherwise."""

    def __init__(self, dataset: Any, *, seed: int, shuffle: bool = True, drop_last: bool = False,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, tagged: bool = False) -> None:
        if isinstance(dataset, IterableDataset):
            raise TypeError("dataset: an IterableDataset has no sampler (its position is its own: torchdata's "
                            "StatefulDataLoader); the job's loader takes a map-style dataset (__getitem__, __len__)")
        super().__init__(dataset, num_replicas=num_replicas or _world_size(),
                         rank=_rank() if rank is None else rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.tagged = tagged
        self._resume: Optional[tuple[int, int]] = None  # (epoch, global samples of it already trained)

    def set_position(self, epoch: int, start: int) -> None:
        """Epoch ``epoch``, from its global sample ``start`` (0: the whole epoch): every iteration of that epoch starts
        there (an iterator made twice, as Lightning does, starts at the same place); any other epoch starts at 0."""
        if not 0 <= start <= self.total_size:
            raise ValueError(f"start={start}: a global sample position from 0 to {self.total_size}")
        self.set_epoch(epoch)
        self._resume = (epoch, start)

    @property
    def start(self) -> int:
        """The global sample the current epoch starts at."""
        return self._resume[1] if self._resume is not None and self._resume[0] == self.epoch else 0

    def order(self) -> list[int]:
        """The epoch's global order, padded (or cut) to a multiple of the ranks as ``DistributedSampler`` does."""
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(len(self.dataset), generator=generator).tolist()
        else:
            indices = list(range(len(self.dataset)))
        if self.drop_last:
            return indices[:self.total_size]
        padding = self.total_size - len(indices)
        while padding > 0:
            indices += indices[:padding]
            padding = self.total_size - len(indices)
        return indices

    def remaining(self) -> int:
        """This rank's samples left in the epoch from the current start."""
        return len(range(self.start + self.rank, self.total_size, self.num_replicas))

    def __iter__(self) -> Iterator[Any]:
        mine = self.order()[self.start + self.rank:self.total_size:self.num_replicas]
        if self.tagged:
            return iter([(self.epoch, index) for index in mine])
        return iter(mine)


class SeededSamples(Dataset):
    """A map-style dataset whose every sample is loaded with generators seeded from (seed, epoch, index): indexed with
    the ``(epoch, index)`` pairs a tagged ``JobSampler`` yields (a plain index loads as the wrapped dataset would).
    Other attributes are the wrapped dataset's (``classes``, ``targets``, ...)."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        epoch, index = key
        seed = sample_seed(self.seed, epoch, index)
        numpy = sys.modules.get("numpy")
        in_main = get_worker_info() is None
        if in_main:  # the training step draws from these: put them back after the sample
            saved = (random.getstate(), numpy.random.get_state() if numpy is not None else None,
                     torch.default_generator.get_state())
        random.seed(seed)
        if numpy is not None:
            numpy.random.seed(seed % 2 ** 32)
        torch.default_generator.manual_seed(seed)  # the CPU generator only: CUDA's belong to the training step
        try:
            return self.dataset[index]
        finally:
            if in_main:
                random.setstate(saved[0])
                if saved[1] is not None:
                    numpy.random.set_state(saved[1])
                torch.default_generator.set_state(saved[2])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "seed"):  # unpickling in a worker: not the wrapped one's
            raise AttributeError(name)
        return getattr(self.dataset, name)


def resumable_loader(dataset: Any, *, seed: int, shuffle: bool, drop_last: bool, owner: str,
                     loader_class: Any = None, **kwargs: Any) -> tuple[Any, JobSampler]:
    """(a DataLoader, its JobSampler): order and random draws from (seed, epoch, sample), and a generator of the
    loader's own (seeded from the seed and the sampler's epoch: ``seed_for``), so making its iterator draws nothing
    from torch's global generator. DataLoader's keywords except the three it makes; ``owner`` names the loader in that
    error."""
    from torch.utils.data import DataLoader  # type: ignore[import-not-found]

    taken = [name for name in ("sampler", "batch_sampler", "generator") if name in kwargs]
    if taken:
        raise TypeError(f"loader: {', '.join(taken)}: {owner} makes its own (its position is what resumes mid-epoch); "
                        "drop them, or use a plain DataLoader and give up exact resume")
    sampler = JobSampler(dataset, seed=seed, shuffle=shuffle, drop_last=drop_last, tagged=True)
    generator = torch.Generator()  # the workers' base seed: never drawn from torch's global generator
    generator.manual_seed(seed + sampler.epoch)
    loader = (loader_class or DataLoader)(SeededSamples(dataset, seed), sampler=sampler, drop_last=drop_last,
                                          generator=generator, **kwargs)
    return loader, sampler
