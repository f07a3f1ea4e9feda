"""Published training throughput per GPU model and workload preset, each number with its source.

Only numbers a vendor or benchmark body published are here; the advisor estimates the rest from the GPU's
figures (gpu_catalog.GPU_SPECS) and labels them `estimated`, and prefers numbers measured on your own
instances (examples/gpu_benchmark.py) over both. A row is per GPU at the GPU count it was measured with.
"""

from __future__ import annotations

from dataclasses import dataclass

DLE_RESNET50 = ("NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README, 'Training performance results' "
                "(pytorch-21.03 NGC container, mixed precision): https://github.com/NVIDIA/DeepLearningExamples/"
                "tree/729963dd47e7c8bd462ad10bfac7a7b0b604e6dd/PyTorch/Classification/ConvNets/resnet50v1.5")
DLE_BERT = ("NVIDIA DeepLearningExamples, PyTorch BERT README, 'Fine-tuning' SQuAD training performance "
            "(pytorch:21.11-py3 NGC container, sequence length 384, mixed precision): "
            "https://github.com/NVIDIA/DeepLearningExamples/tree/729963dd47e7c8bd462ad10bfac7a7b0b604e6dd/"
            "PyTorch/LanguageModeling/BERT")
NEMO_AUTOMODEL = ("NVIDIA NeMo AutoModel performance summary, 'Finetuning (LoRA) Performance', Llama3 70B, DGX-H100, "
                  "BF16, sequence length 4096, TP 2 PP 4 (updated 2025-10-02): https://github.com/NVIDIA-NeMo/"
                  "Automodel/blob/main/docs/performance-summary.md")


@dataclass(frozen=True)
class PublishedThroughput:
    gpu_model: str  # as in gpu_catalog
    workload: str  # an advisor preset
    gpus: int  # GPUs in the published run
    samples_per_second_per_gpu: float  # images, sequences or tokens per second, per GPU
    measured_on: str  # the exact hardware, where it differs from the catalog's variant
    source: str


PUBLISHED: tuple[PublishedThroughput, ...] = (
    PublishedThroughput("NVIDIA A100", "resnet50-imagenet", 1, 2470, "DGX A100, A100 80GB SXM", DLE_RESNET50),
    PublishedThroughput("NVIDIA A100", "resnet50-imagenet", 8, 16621 / 8, "DGX A100, A100 80GB SXM (16,621 img/s on 8)",
                        DLE_RESNET50),
    PublishedThroughput("NVIDIA V100", "resnet50-imagenet", 1, 1200, "DGX-1, V100 16GB", DLE_RESNET50),
    PublishedThroughput("NVIDIA V100", "resnet50-imagenet", 8, 8322 / 8, "DGX-1, V100 16GB (8,322 img/s on 8)",
                        DLE_RESNET50),
    PublishedThroughput("NVIDIA A100", "bert-large-finetune", 1, 110.5, "DGX A100, A100 80GB SXM", DLE_BERT),
    PublishedThroughput("NVIDIA A100", "bert-large-finetune", 8, 846.7 / 8, "DGX A100, A100 80GB SXM (846.7 seq/s on 8)",
                        DLE_BERT),
    PublishedThroughput("NVIDIA V100", "bert-large-finetune", 1, 52, "DGX-1, V100 32GB", DLE_BERT),
    PublishedThroughput("NVIDIA V100", "bert-large-finetune", 8, 382 / 8, "DGX-1, V100 32GB (382 seq/s on 8)", DLE_BERT),
    PublishedThroughput("NVIDIA H100", "llm-70b-lora", 8, 608.42, "DGX-H100, H100 80GB SXM (tokens/s per GPU)",
                        NEMO_AUTOMODEL),
)


def published(gpu_model: str, workload: str) -> list[PublishedThroughput]:
    """The published rows for a GPU and workload, fewest GPUs first."""
    return sorted((row for row in PUBLISHED if row.gpu_model == gpu_model and row.workload == workload),
                  key=lambda row: row.gpus)
