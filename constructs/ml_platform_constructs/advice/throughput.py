"""Training throughput per accelerator and workload preset: published numbers, each with its source, and the
sustained speed of every GPU relative to the A100 80 GB, from which the advisor derives the numbers nobody published.

Two tables:

- ``PUBLISHED``: per-GPU training throughput a vendor or benchmark published for a preset (or for a reference run
  converted to the preset by a stated rule, ``rule``), at the GPU count it was measured with.
- ``RELATIVE_SPEED``: sustained mixed-precision training speed per GPU model relative to the A100 80 GB SXM, per
  workload class ("convnet": ResNet-50; "transformer": BERT-large), measured by one harness on every GPU it
  covers (Lambda's PyTorch benchmark of NVIDIA's DeepLearningExamples models) or derived from the nearest measured
  GPU by a stated rule. Peak TFLOPS are not a speed: a 70 W T4 does not sustain its peak, an A10G with half the
  tensor TFLOPS of an L4 has twice its memory bandwidth.

The advisor estimates a GPU without a published number as: the published number of the nearest GPU (by relative
speed) x the ratio of their relative speeds. So the estimated H100/A100 ratio is the same whichever GPU a
workload's published number came from. Measurements on your own instances (examples/gpu_benchmark.py) come first.
docs/THROUGHPUT.md lists every row (python -m ops.advise --throughput-table writes it).
"""

from __future__ import annotations

from dataclasses import dataclass

DLE_RESNET50 = ("NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README, 'Training performance results' "
                "(pytorch-21.03 NGC container, mixed precision, DALI): https://github.com/NVIDIA/DeepLearningExamples/"
                "tree/729963dd47e7c8bd462ad10bfac7a7b0b604e6dd/PyTorch/Classification/ConvNets/resnet50v1.5")
DLE_BERT = ("NVIDIA DeepLearningExamples, PyTorch BERT README, 'Fine-tuning' SQuAD training performance "
            "(pytorch:21.11-py3 NGC container, sequence length 384, mixed precision): "
            "https://github.com/NVIDIA/DeepLearningExamples/tree/729963dd47e7c8bd462ad10bfac7a7b0b604e6dd/"
            "PyTorch/LanguageModeling/BERT")
NEMO_AUTOMODEL = ("NVIDIA NeMo AutoModel performance summary, DGX-H100, BF16, sequence length 4096, mock data "
                  "(docs/performance-summary.mdx at commit cb9765441, 2026-06-12): https://github.com/NVIDIA-NeMo/"
                  "Automodel/blob/main/docs/performance-summary.mdx")
LAMBDA = ("Lambda deeplearning-benchmark, PyTorch training throughput, FP16/AMP, one GPU, NVIDIA DeepLearningExamples "
          "models on synthetic data (pytorch/pytorch-train-throughput-fp16.csv at commit 4e11f68, 2024-07-24): "
          "https://github.com/lambdal/deeplearning-benchmark/tree/main/pytorch")
LAMBDA_V2 = ("the same benchmark's v2 runs (pytorch/pytorch-train-throughput-v2-fp16.csv at commit 200af3b, "
             "2025-12-10): H200 140GB SXM 1x (LambdaBM_ENG04) against H100 80GB SXM5 1x (LambdaOD 192-222-52-83)")
LAMBDA_RAW = ("the same benchmark's raw v1 logs (pytorch/results/A100_40GB_SXM4_v1 and A100_80GB_SXM4_v1, "
              "2022-11-19): ResNet-50 AMP train.total_ips, BERT-large SQuAD FP16 training_sequences_per_second")
DLE_T4_RESNET = ("NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README, 'Inference performance: NVIDIA T4' and "
                 "'NVIDIA DGX-1 (1x V100 16GB)', mixed precision, batch 256 (same commit as above)")
DLE_T4_BERT = ("NVIDIA DeepLearningExamples, TensorFlow BERT README, SQuAD v1.1 fine-tuning inference, BERT-large, "
               "sequence 384, batch 8, FP16: 'NVIDIA Tesla T4 (1x T4 16GB)' and 'NVIDIA DGX-1 (1x V100 16GB)'")
NEURON = "AWS Neuron architecture pages (see gpu_catalog.GPU_SPECS)"

CLASSES = ("convnet", "transformer")


@dataclass(frozen=True)
class PublishedThroughput:
    gpu_model: str  # as in gpu_catalog
    workload: str  # an advisor preset
    gpus: int  # GPUs in the published run
    samples_per_second_per_gpu: float  # images, sequences or tokens per second, per GPU
    measured_on: str  # the exact hardware and run
    source: str
    rule: str = ""  # how the preset's number follows from the published one; empty: as published


# Hardware FLOPs per token of the reference runs (no activation recomputation in NeMo's benchmarks): 6N for full
# training, 4N for LoRA (no weight gradients of the frozen base); the presets assume full activation checkpointing
# and count 8N and 6N. "Equal FLOP rate": preset tokens/s = published tokens/s x reference FLOPs / preset FLOPs.
LLAMA3_8B = 8.03e9
LLAMA3_70B = 70.6e9


def _equal_flop_rate(tokens_per_second: float, reference_flops: float, preset_flops: float) -> float:
    return tokens_per_second * reference_flops / preset_flops


PUBLISHED: tuple[PublishedThroughput, ...] = (
    PublishedThroughput("NVIDIA A100 80GB", "resnet50-imagenet", 1, 2470, "DGX A100, A100 80GB SXM", DLE_RESNET50),
    PublishedThroughput("NVIDIA A100 80GB", "resnet50-imagenet", 8, 16621 / 8, "DGX A100, A100 80GB SXM (16,621 img/s "
                        "on 8)", DLE_RESNET50),
    PublishedThroughput("NVIDIA V100", "resnet50-imagenet", 1, 1200, "DGX-1, V100 16GB", DLE_RESNET50),
    PublishedThroughput("NVIDIA V100", "resnet50-imagenet", 8, 8322 / 8, "DGX-1, V100 16GB (8,322 img/s on 8)",
                        DLE_RESNET50),
    PublishedThroughput("NVIDIA A100 80GB", "bert-large-finetune", 1, 110.5, "DGX A100, A100 80GB SXM", DLE_BERT),
    PublishedThroughput("NVIDIA A100 80GB", "bert-large-finetune", 8, 846.7 / 8, "DGX A100, A100 80GB SXM (846.7 "
                        "seq/s on 8)", DLE_BERT),
    PublishedThroughput("NVIDIA V100", "bert-large-finetune", 1, 52, "DGX-1, V100 32GB", DLE_BERT),
    PublishedThroughput("NVIDIA V100", "bert-large-finetune", 8, 382 / 8, "DGX-1, V100 32GB (382 seq/s on 8)", DLE_BERT),
    PublishedThroughput(
        "NVIDIA H100", "llm-7b-lora", 1, _equal_flop_rate(12472.87, 4 * LLAMA3_8B, 6 * 6.74e9),
        "DGX-H100, one H100 80GB SXM: Llama3 8B LoRA, 12,472.87 tokens/s", NEMO_AUTOMODEL,
        "equal FLOP rate: 12,472.87 tokens/s x 4 x 8.03e9 (Llama 3 8B, LoRA, no recomputation) / 6 x 6.74e9 "
        "(the preset: Llama-2-7B shape, LoRA with activation checkpointing)"),
    PublishedThroughput(
        "NVIDIA H100", "llm-70b-lora", 8, _equal_flop_rate(1091.85, 4 * LLAMA3_70B, 6 * LLAMA3_70B),
        "DGX-H100, 8 H100 80GB SXM: Llama3 70B LoRA, TP 2, FSDP 4, 1,091.85 tokens/s per GPU", NEMO_AUTOMODEL,
        "equal FLOP rate: 1,091.85 tokens/s per GPU x 4N (LoRA, no recomputation) / 6N (the preset: LoRA with "
        "activation checkpointing)"),
    PublishedThroughput(
        "NVIDIA H100", "llm-7b-full", 64, _equal_flop_rate(866.77, 6 * LLAMA3_70B, 8 * 6.74e9),
        "DGX-H100, 64 H100 80GB SXM: Llama3 70B pre-training, 866.77 tokens/s per GPU (the nearest published full "
        "training run)", NEMO_AUTOMODEL,
        "equal FLOP rate: 866.77 tokens/s per GPU x 6 x 70.6e9 (full training, no recomputation) / 8 x 6.74e9 "
        "(the preset: full fine-tuning with activation checkpointing); inherited overhead: the per-GPU rate holds "
        "the 64-GPU run's inter-node communication across 8 DGX-H100 nodes, kept as it stands by every shape of "
        "fewer GPUs and every estimate taken from it (pessimistic for one instance; no source gives its one-node "
        "rate)"),
)


@dataclass(frozen=True)
class RelativeSpeed:
    """Sustained training speed relative to the A100 80 GB SXM (1.0), per workload class."""

    gpu_model: str
    convnet: float
    transformer: float
    source: str  # where the numbers come from
    rule: str = ""  # how they follow from it; empty: measured as they stand
    uncertainty: str = ""  # where the ratio is not a training measurement: what it is and how far it may be off

    def of(self, workload_class: str) -> float:
        return getattr(self, workload_class)


# Lambda's one-GPU FP16 numbers (images/s ResNet-50, sequences/s BERT-large SQuAD): A100 80GB SXM4 1,582 and 152;
# H100 80GB SXM5 2,616 and 301; V100 16GB 833 and 57; A10 638 and 42; RTX 6000 Ada 1,146 and 79.
_A100 = (1582, 152)
_RTX6000_ADA = (1146 / 1582, 79 / 152)  # AD102, 142 SMs, 364.25 dense FP16 TFLOPS, 960 GB/s (NVIDIA datasheet)
_H100 = (2616 / 1582, 301 / 152)
_V100 = (833 / 1582, 57 / 152)
_T4_OVER_V100 = (1198 / 3382, 38.29 / 148.57)
# NVIDIA publishes T4 inference throughput for these models, no T4 training throughput (DeepLearningExamples'
# READMEs), and Lambda's training benchmark has no T4: the T4's training ratio is derived from inference.
T4_UNCERTAINTY = ("derived from inference, not training: the backward pass's share and the T4's 70 W clocks under "
                  "sustained training may move it; assumed within +/-30% until measured")
_TRAINIUM_RULE = ("datasheet rule, the least certain row: dense BF16 TFLOPS / the A100's 312 (the A100's sustained "
                  "share of its peak assumed); replace it with a measurement on Neuron before committing to Trainium")

RELATIVE_SPEED: dict[str, RelativeSpeed] = {row.gpu_model: row for row in (
    RelativeSpeed("NVIDIA A100 80GB", 1.0, 1.0, LAMBDA, "the reference: A100 80GB SXM4, 1,582 images/s and 152 seq/s"),
    RelativeSpeed("NVIDIA A100", 1455.37 / 1582.44, 133.59 / 152.85, LAMBDA_RAW,
                  "A100 40GB SXM4 / A100 80GB SXM4 in the same runs: 1,455.37 / 1,582.44 images/s, 133.59 / 152.85 "
                  "seq/s (the 40 GB fits a smaller BERT batch)"),
    RelativeSpeed("NVIDIA H100", *_H100, LAMBDA, "H100 80GB SXM5: 2,616 images/s, 301 seq/s"),
    RelativeSpeed("NVIDIA H200", _H100[0] * 3079 / 2683, _H100[1] * 350 / 321, LAMBDA_V2,
                  "the H100's x H200/H100 in the v2 runs: 3,079 / 2,683 images/s, 350 / 321 seq/s"),
    RelativeSpeed("NVIDIA V100", *_V100, LAMBDA, "V100 16GB: 833 images/s, 57 seq/s"),
    RelativeSpeed("NVIDIA V100 32GB", *_V100, LAMBDA, "as the V100 16GB (same GPU, more memory)"),
    RelativeSpeed("NVIDIA A10G", 638 / 1582, 42 / 152, LAMBDA,
                  "the A10's (Lambda Cloud A10: 638 images/s, 42 seq/s): the A10G is AWS's variant of the same GA102 "
                  "with the same 600 GB/s; AWS measured G5 at up to 4x G4dn's PyTorch inference throughput "
                  "(https://aws.amazon.com/blogs/machine-learning/achieve-four-times-higher-ml-inference-throughput-"
                  "at-three-times-lower-cost-per-inference-with-amazon-ec2-g5-instances-for-nlp-and-cv-pytorch-models)"),
    RelativeSpeed("NVIDIA L40S", _RTX6000_ADA[0] * 0.9, _RTX6000_ADA[1] * 0.9, LAMBDA,
                  "same-architecture rule from the RTX 6000 Ada (same AD102 die and SM count: 1,146 images/s, 79 "
                  "seq/s) x min(TFLOPS ratio 362.05/364.25, bandwidth ratio 864/960) = x 0.9"),
    RelativeSpeed("NVIDIA L4", _RTX6000_ADA[0] * 300 / 960, _RTX6000_ADA[1] * 300 / 960, LAMBDA,
                  "same-architecture rule from the RTX 6000 Ada (Ada, measured) x min(TFLOPS ratio 121/364.25, "
                  "bandwidth ratio 300/960) = x 0.3125"),
    RelativeSpeed("NVIDIA T4", _V100[0] * _T4_OVER_V100[0], _V100[1] * _T4_OVER_V100[1],
                  f"{DLE_T4_RESNET}; {DLE_T4_BERT}",
                  "the V100's x T4/V100 in NVIDIA's large-batch mixed-precision throughput on the same model: "
                  "ResNet-50 1,198 / 3,382 images/s, BERT-large 38.29 / 148.57 seq/s (compute-bound work: the "
                  "T4's sustained clocks at 70 W show, its 65 peak TFLOPS do not)", T4_UNCERTAINTY),
    RelativeSpeed("NVIDIA T4G", _V100[0] * _T4_OVER_V100[0], _V100[1] * _T4_OVER_V100[1],
                  f"{DLE_T4_RESNET}; {DLE_T4_BERT}", "as the T4 (assumed: the same TU104 GPU with a Graviton host)",
                  T4_UNCERTAINTY),
    RelativeSpeed("AWS Trainium", 190 / 312, 190 / 312, NEURON, _TRAINIUM_RULE),
    RelativeSpeed("AWS Trainium2", 667 / 312, 667 / 312, NEURON, _TRAINIUM_RULE),
)}


def published(gpu_model: str, workload: str) -> list[PublishedThroughput]:
    """The published rows for a GPU and workload, fewest GPUs first."""
    return sorted((row for row in PUBLISHED if row.gpu_model == gpu_model and row.workload == workload),
                  key=lambda row: row.gpus)
