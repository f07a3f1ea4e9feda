#!/usr/bin/env python3
"""Hugging Face Trainer on the platform: a tiny BERT classifier, built from a config (nothing is downloaded), trained
on made-up token sequences, with the three lines of the job side's Trainer adapter (docs/BRING_YOUR_SCRIPT.md) marked
``# platform``. It survives a Spot reclaim: stopped mid-epoch, it resumes from the Trainer's own checkpoint (skipping
the batches already trained) and ends with the weights of an uninterrupted run.

    ./platform job rehearse --exact -- python examples/hf_trainer.py
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from ml_platform_job.transformers import PlatformCallback  # platform


class Sequences(torch.utils.data.Dataset):
    """Token sequences whose label says whether token 7 occurs in them."""

    def __init__(self, samples: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 64, (samples, 16), generator=generator)
        self.labels = (self.ids == 7).any(dim=1).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "attention_mask": torch.ones(16, dtype=torch.long),
                "labels": self.labels[index]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Hugging Face Trainer run that survives a Spot reclaim")
    parser.add_argument("--epochs", type=float, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output-dir", default=None, help="the Trainer's output_dir (default: a temporary one)")
    args = parser.parse_args(argv)
    training_args = TrainingArguments(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="hf-trainer-"), num_train_epochs=args.epochs,
        per_device_train_batch_size=16, learning_rate=5e-3, seed=args.seed, save_strategy="steps", save_steps=8,
        eval_strategy="epoch", logging_steps=8, report_to=[], use_cpu=True, disable_tqdm=True)
    platform = PlatformCallback(training_args)  # platform
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    trainer = Trainer(model=BertForSequenceClassification(config), args=training_args,
                      train_dataset=Sequences(320, seed=1), eval_dataset=Sequences(64, seed=2),
                      callbacks=[platform])  # platform
    trainer.train(resume_from_checkpoint=platform.resume_from)  # platform
    platform.finish(trainer)  # platform


if __name__ == "__main__":
    main()
