#!/usr/bin/env python3
"""PyTorch Lightning on the platform: a small classifier with dropout on made-up data, with the lines of the job
side's Lightning adapter (docs/BRING_YOUR_SCRIPT.md) marked ``# platform``. It survives a Spot reclaim exactly:
stopped mid-epoch, it resumes at the batch it stopped at and ends with the weights of an uninterrupted run.

    ./platform job rehearse --exact -- python examples/lightning_module.py
"""

from __future__ import annotations

import argparse
import tempfile

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from ml_platform_job.lightning import PlatformCallback  # platform


class Points(torch.utils.data.Dataset):
    """Points in 8 dimensions around 4 centres; each sample jittered when loaded (the augmentation a resume must
    reproduce)."""

    def __init__(self, samples: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        centres = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)) * 2
        self.labels = torch.randint(0, 4, (samples,), generator=generator)
        self.points = centres[self.labels] + torch.randn(samples, 8, generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.points[index] + 0.1 * torch.randn(8), self.labels[index]


class Classifier(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 4))

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y))  # the platform's overfitting rule reads it
        self.log("val_accuracy", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.5)}


class Data(L.LightningDataModule):
    def __init__(self, platform: PlatformCallback, batch_size: int, num_workers: int) -> None:
        super().__init__()
        self.platform, self.batch_size, self.num_workers = platform, batch_size, num_workers

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return self.platform.loader(Points(3072, seed=1), batch_size=self.batch_size, shuffle=True,  # platform
                                    num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(Points(256, seed=2), batch_size=128)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Lightning run that survives a Spot reclaim exactly")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    args = parser.parse_args(argv)
    platform = PlatformCallback(args, flags=["num_workers"])  # platform
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, deterministic=True,
                        accumulate_grad_batches=args.accumulate,
                        default_root_dir=tempfile.mkdtemp(prefix="lightning-"), callbacks=[platform])  # platform
    trainer.fit(Classifier(args.lr), datamodule=Data(platform, args.batch_size, args.num_workers),
                ckpt_path=platform.ckpt_path)  # platform
    platform.finish(trainer)  # platform


if __name__ == "__main__":
    main()
