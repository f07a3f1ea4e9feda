"""Which accelerator, at what cost: the instance catalog, published throughput, the price table, the GPU advisor,
the cost of a finished job and the budget what-if. Standard library (and boto3 where AWS is read) only: no CDK."""

from .._package import lazy_exports

_EXPORTS = {
    "ACCELERATOR_CATALOG": "gpu_catalog",
    "GPU_CATALOG": "gpu_catalog",
    "GpuInstanceType": "gpu_catalog",
    "PriceTable": "price_table",
    "Advice": "advisor",
    "CostAssumptions": "advisor",
    "MeasuredThroughput": "advisor",
    "Option": "advisor",
    "PRESETS": "advisor",
    "Workload": "advisor",
    "advise": "advisor",
    "fleet_block": "advisor",
    "queue_block": "advisor",
    "what_if": "budget_what_if",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
