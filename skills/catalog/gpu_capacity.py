"""The rule that a pod cannot ask more GPUs than its instance type has: a request no
node of that type can ever satisfy is the caller's input error (NOT_ENOUGH_GPUS, dry
run included), not a pod left Pending with a warning."""

from __future__ import annotations

from skills.catalog.instances import INSTANCES, SAGEMAKER_PREFIX, InstanceSpec, instance_spec
from skills.shared.errors import ErrorCode, ToolFailure


def larger_instance(spec: InstanceSpec, gpus: int) -> InstanceSpec | None:
    """The instance with at least `gpus` GPUs of the same GPU (else of any GPU) that has
    the fewest GPUs, then the lowest price (unpriced last); None when none has enough."""
    fitting = [i for i in INSTANCES if i.gpus >= gpus]
    pool = [i for i in fitting if i.gpu == spec.gpu] or fitting
    if not pool:
        return None
    return min(pool, key=lambda i: (i.gpus, i.usd_per_hour is None, i.usd_per_hour or 0.0))


def require_gpus_per_node(instance_type: str, gpu_per_node: int) -> None:
    """Raise NOT_ENOUGH_GPUS when `gpu_per_node` exceeds the GPUs of `instance_type`.
    A type not in the catalogue is let through: there is nothing to check it against
    (the memory estimate does the same)."""
    try:
        spec = instance_spec(instance_type)
    except ToolFailure:
        return
    if gpu_per_node <= spec.gpus:
        return
    bigger = larger_instance(spec, gpu_per_node)
    # Name the larger type the way the caller named theirs (a SageMaker `ml.` name stays one).
    prefix = SAGEMAKER_PREFIX if instance_type.strip().lower().startswith(SAGEMAKER_PREFIX) else ""
    hint = f"Use gpu_per_node={spec.gpus} or fewer on {instance_type}"
    if bigger is not None:
        hint += f", or instance_type={prefix}{bigger.name} ({bigger.gpus} x {bigger.gpu})"
    else:
        hint += f" (no instance type has {gpu_per_node} GPUs: add nodes with num_nodes)"
    raise ToolFailure(
        ErrorCode.NOT_ENOUGH_GPUS,
        f"gpu_per_node={gpu_per_node} but {instance_type} has {spec.gpus} GPU(s) "
        f"({spec.gpu}): no node of that type can run the pod",
        hint + ".",
        {
            "instance_type": instance_type,
            "instance_gpus": spec.gpus,
            "gpu_per_node": gpu_per_node,
            "larger_instance_type": f"{prefix}{bigger.name}" if bigger else None,
        },
    )


def instance_gpus(instance_type: str | None) -> int | None:
    """The GPUs of `instance_type`; None without one or for a type not in the catalogue."""
    if not instance_type:
        return None
    try:
        return instance_spec(instance_type).gpus
    except ToolFailure:
        return None


def idle_gpu_warning(instance_type: str | None, gpu_per_node: int, nodes: int) -> str | None:
    """A warning when a job on an EFA instance (billed whole, one pod per node) asks
    fewer GPUs per node than the instance has, with what the idle GPUs cost an hour."""
    try:
        spec = instance_spec(instance_type) if instance_type else None
    except ToolFailure:
        return None
    if spec is None or not spec.efa or gpu_per_node >= spec.gpus:
        return None
    idle = spec.gpus - gpu_per_node
    text = (
        f"gpu_per_node={gpu_per_node} leaves {idle} of {spec.gpus} GPUs idle on each "
        f"{spec.name} (x{nodes} nodes)"
    )
    if spec.usd_per_hour is not None:
        # The node is billed whole: the idle GPUs' share of its on-demand price.
        cost = spec.usd_per_hour * idle / spec.gpus * nodes
        text += f": ~${cost:,.2f}/h of ${spec.usd_per_hour * nodes:,.2f}/h paid for nothing"
    return text + f"; leave gpu_per_node unset to use all {spec.gpus}"
