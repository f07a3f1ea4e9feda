#!/usr/bin/env python3
"""Measures the advisor's presets' training throughput on this machine's GPU and publishes it (PyTorch).

  python examples/gpu_benchmark.py --workload all --bucket DATASET_BUCKET [--seconds 60] [--gpus 1]
  python examples/gpu_benchmark.py --workload resnet50-imagenet --no-publish      # a laptop: print only

Runs wherever CUDA runs (a fleet instance, a queue job, a workstation) with synthetic data, so it measures
the GPU and not the input pipeline. Needs torch (and torchvision for resnet50-imagenet); the platform does not
install them: use the Deep Learning AMI's or your container's. Timing, the record and publishing are in
ml_platform_job.benchmark (tested on CPU); this file only builds the models.

What each preset runs (one GPU; the advisor scales per-GPU numbers to a shape):
- resnet50-imagenet: torchvision ResNet-50, 224x224, batch 256, channels-last, SGD with momentum, autocast;
- bert-large-finetune: 24 encoder layers (hidden 1024, 16 heads, FFN 4096), sequence 384, batch 32, a span
  head, AdamW, autocast (no embeddings: they are a lookup);
- llm-*: Llama-shaped decoder layers (hidden, heads, FFN of the preset; SwiGLU's three matrices as one FFN of
  1.5x the width, the same FLOPs) with activation checkpointing, sequence 4096, batch 1, BF16, AdamW; LoRA
  presets freeze the layer weights (no weight gradients, as LoRA; the adapters' own cost is under 1%).
  Only --layers layers are built (a 70B model fits no single GPU) and the tokens/s are scaled by
  layers/total layers, since a decoder's work is linear in its layers; embeddings and LM head are left out.

The record goes to s3://BUCKET/benchmarks/<workload>/<instance type>/<time>.json and the metric to
CloudWatch MLPlatform/Benchmark TrainingThroughputPerGpu; the job's role needs s3:PutObject on benchmarks/
and cloudwatch:PutMetricData.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ml_platform_job.instances import INSTANCE_SHAPES
from ml_platform_job.benchmark import benchmark_record, local_instance_type, measure, publish

LLM_SHAPES = {  # hidden, heads, FFN, total layers
    "llm-7b-lora": (4096, 32, 11008, 32), "llm-7b-full": (4096, 32, 11008, 32), "llm-70b-lora": (8192, 64, 28672, 80),
}
WORKLOADS = ["resnet50-imagenet", "bert-large-finetune", *LLM_SHAPES]


def _dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def resnet50(device):
    import torchvision
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(256, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (256,), device=device)

    def step():
        with torch.autocast("cuda", dtype=_dtype()):
            loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step, 256, 1.0, {"batch": 256}


def bert_large(device):
    layer = nn.TransformerEncoderLayer(1024, 16, 4096, activation="gelu", batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 24), nn.Linear(1024, 2)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    tokens = torch.randn(32, 384, 1024, device=device)

    def step():
        with torch.autocast("cuda", dtype=_dtype()):
            loss = model(tokens).float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step, 32, 1.0, {"batch": 32, "sequence": 384}


def llm(device, workload: str, layers: int):
    hidden, heads, ffn, total = LLM_SHAPES[workload]
    blocks = nn.ModuleList(nn.TransformerEncoderLayer(hidden, heads, int(ffn * 1.5), activation="gelu",
                                                      batch_first=True, norm_first=True, dtype=torch.bfloat16)
                           for _ in range(layers)).to(device)
    lora = workload.endswith("lora")
    for parameter in blocks.parameters():
        parameter.requires_grad_(not lora)
    sequence = 4096
    mask = nn.Transformer.generate_square_subsequent_mask(sequence, device=device, dtype=torch.bfloat16)
    inputs = torch.randn(1, sequence, hidden, device=device, dtype=torch.bfloat16, requires_grad=lora)
    optimizer = None if lora else torch.optim.AdamW(blocks.parameters(), lr=1e-5)

    def step():
        x = inputs
        for block in blocks:
            x = checkpoint(lambda t, b=block: b(t, src_mask=mask, is_causal=True), x, use_reentrant=False)
        x.float().pow(2).mean().backward()
        if optimizer:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    # tokens per step, scaled to the whole model's layers
    return step, sequence, layers / total, {"sequence": sequence, "layers_built": layers, "layers": total}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--layers", type=int, default=2, help="decoder layers built for the llm-* presets")
    parser.add_argument("--bucket", default=os.environ.get("ML_PLATFORM_DATASET_BUCKET"))
    parser.add_argument("--instance-type", default=os.environ.get("ML_PLATFORM_INSTANCE_TYPE"))
    parser.add_argument("--no-publish", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark measures GPUs")
    if not args.no_publish and not args.bucket:
        raise SystemExit("--bucket (or ML_PLATFORM_DATASET_BUCKET) is required to publish; --no-publish to print only")
    device = torch.device("cuda")
    instance_type = args.instance_type or local_instance_type() or "unknown"
    entry = INSTANCE_SHAPES.get(instance_type)
    gpu_model = entry.gpu if entry else torch.cuda.get_device_name(device)
    clients = None
    if not args.no_publish:
        import boto3
        clients = {"s3": boto3.client("s3"), "cloudwatch": boto3.client("cloudwatch")}
    for workload in WORKLOADS if args.workload == "all" else [args.workload]:
        if workload == "resnet50-imagenet":
            step, per_step, scale, details = resnet50(device)
        elif workload == "bert-large-finetune":
            step, per_step, scale, details = bert_large(device)
        else:
            step, per_step, scale, details = llm(device, workload, args.layers)
        measurement = measure(step, per_step * scale, min_seconds=args.seconds, sync=torch.cuda.synchronize)
        record = benchmark_record(instance_type=instance_type, gpu_model=gpu_model, workload=workload, gpus=1,
                                  measurement=measurement, framework=f"torch {torch.__version__}",
                                  details={**details, "device": torch.cuda.get_device_name(device)})
        if clients:
            record["s3_key"] = publish(record, bucket=args.bucket, **clients)
        print(json.dumps(record))
        del step
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
