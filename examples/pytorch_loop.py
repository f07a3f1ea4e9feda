#!/usr/bin/env python3
"""A plain PyTorch training loop on the platform: a small convolutional network on 28x28 digit images, shaped like
pytorch/examples' MNIST script, with the few lines of the job side's adapter (docs/BRING_YOUR_SCRIPT.md) marked
``# platform``. It survives a Spot reclaim exactly: stopped mid-epoch and resumed, it ends with the weights of an
uninterrupted run, bit for bit, with data-loader workers, persistent workers and random augmentation.

The images are made here (class-shaped strokes, noise and a random shift per sample), so the example needs no
download and no torchvision: ``python examples/pytorch_loop.py`` with ``ML_PLATFORM_CHECKPOINT_URI`` set, or
``./platform job rehearse -- python examples/pytorch_loop.py`` to rehearse a reclaim.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

from ml_platform_job import TrainingJob  # platform


class Digits(Dataset):
    """Synthetic digits: each class a fixed pattern of strokes, each sample that pattern with noise; training
    samples are shifted by up to 2 pixels at random when loaded (the augmentation a resume must reproduce)."""

    def __init__(self, samples: int, *, seed: int, train: bool) -> None:
        patterns = (torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(0)) > 0.8).float()
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (samples,), generator=generator)
        self.images = patterns[self.labels] + 0.3 * torch.randn(samples, 1, 28, 28, generator=generator)
        self.train = train

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.train:
            shift = torch.randint(-2, 3, (2,))
            image = torch.roll(image, shifts=(int(shift[0]), int(shift[1])), dims=(1, 2))
        return image, self.labels[index]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(2304, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def train(args: argparse.Namespace, model: Net, device: torch.device, train_loader, optimizer, epoch: int,
          job: TrainingJob) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        loss = F.nll_loss(model(data), target) / train_loader.accumulate  # platform: elastic (1 but when resized)
        loss.backward()
        job.observe(loss=loss)  # platform: the health rules (a diverging or NaN loss stops the job, exit 85)
        if train_loader.step_due:  # platform: elastic, the global batch kept at any world size
            optimizer.step()
            optimizer.zero_grad()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item():.6f}",
                  flush=True)


def test(model: Net, device: torch.device, test_loader: DataLoader) -> tuple[float, float]:
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    accuracy = correct / len(test_loader.dataset)
    print(f"Test set: Accuracy: {correct}/{len(test_loader.dataset)} ({100 * accuracy:.0f}%)", flush=True)
    return accuracy, loss / len(test_loader.dataset)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A plain PyTorch loop that survives a Spot reclaim exactly")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--samples", type=int, default=1920, help="training images")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--deterministic", action="store_true", help="torch's deterministic algorithms")
    parser.add_argument("--global-batch", type=int, default=None,
                        help="samples per optimizer step at any world size (an elastic job: accumulation makes up the "
                             "rest); default: --batch-size on each rank")
    args = parser.parse_args(argv)
    job = TrainingJob.start(params=args, flags=["num_workers"], deterministic=args.deterministic)  # platform
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    accumulate = job.world.accumulation(args.global_batch, args.batch_size) if args.global_batch else 1  # platform
    train_kwargs = {"batch_size": args.batch_size, "shuffle": True, "accumulate": accumulate}
    if args.num_workers:
        train_kwargs.update(num_workers=args.num_workers, persistent_workers=True, pin_memory=device.type == "cuda")
    train_loader = job.loader(Digits(args.samples, seed=7, train=True), **train_kwargs)  # platform
    test_loader = DataLoader(Digits(200, seed=8, train=False), batch_size=100)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    job.track(model=model, optimizer=optimizer, scheduler=scheduler)  # platform
    for epoch in job.epochs(1, args.epochs + 1):  # platform
        train(args, model, device, train_loader, optimizer, epoch, job)
        accuracy, val_loss = test(model, device, test_loader)
        job.log_holdout(accuracy=accuracy)  # platform
        job.observe(val_loss=val_loss)  # platform: the overfitting rule
        scheduler.step()
    job.finish(model=model)  # platform


if __name__ == "__main__":
    main()
