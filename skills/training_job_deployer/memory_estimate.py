"""Per-GPU memory of a training plan, from the model's shape and the catalogue's GPU.

    model_shape(spec)            the preset's (or a local HF config.json's) dimensions
    estimate(shape, ...)         bytes per GPU, term by term (states, transient, activations)
    check_fits(spec, instance)   the estimate against the instance's GPU memory; a plan
                                 that cannot fit is refused naming the knobs that fix it
    staging_bytes(spec, shape)   what an async save stages in each node's host memory
                                 (check_host_fits: against the instance's memory)

The preset dimensions the estimate needs are a data table (model_names.py) pinned to
trainer/presets.py by a test; the state bytes a parameter and the strategy `auto` runs
are the trainer's own rules (trainer/rules.py, torch-free). The terms follow the
trainer (trainer/model.py, parallel.py):

- states: fp32 master parameters, fp32 gradients and AdamW's two fp32 moments,
  STATE_BYTES_PER_PARAM (16) a parameter, sharded over the FSDP group (the world; a node
  under `hybrid`; not at all under `no_shard`); on the host instead under cpu_offload.
- transient: FSDP2 all-gathers a block's parameters in the compute dtype before using it
  and holds its unsharded gradient before the reduce-scatter; with prefetch two blocks
  are in flight, plus the root group (embeddings, final norm, lm_head) for the whole step.
- activations per token of a micro-batch (flash-style SDPA: nothing quadratic in seq),
  in elements of the compute dtype: per block 12*dim + 3*kv_dim + 4*ffn (no
  checkpointing), dim + the matmul outputs (selective), dim (full) plus one block's
  worth while it recomputes, plus one block's worth of activation gradients in
  backward; the logits in the compute dtype plus two fp32 copies
  (the loss's upcast and log-softmax) and the fp32 gradient.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from skills.catalog.instances import host_resources, instance_spec
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.reading import load_json
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.model_names import PRESET_SHAPES, TOY_PRESETS, family_sizes
from trainer.backends import process_group_backend
from trainer.rules import STATE_BYTES_PER_PARAM, resolve_strategy

GIB = 1024**3
# What a GPU cannot give the tensors: CUDA context, NCCL buffers, allocator fragmentation.
RESERVED_FIXED = 2 * GIB
RESERVED_SHARE = 0.08
# The trainer's defaults, for JobSpec fields left None (trainer/config.py).
DEFAULT_BATCH, DEFAULT_SEQ = 8, 128


@dataclass(frozen=True)
class ModelShape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_dim: int
    tied: bool = False

    @property
    def kv_dim(self) -> int:
        return self.dim // self.n_heads * self.n_kv_heads

    @property
    def block_params(self) -> int:
        attention = 2 * self.dim * self.dim + 2 * self.dim * self.kv_dim
        return attention + 3 * self.dim * self.ffn_dim + 2 * self.dim

    @property
    def root_params(self) -> int:
        """Embeddings, final norm and (untied) lm_head: FSDP's root group."""
        return self.vocab_size * self.dim * (1 if self.tied else 2) + self.dim

    @property
    def params(self) -> int:
        return self.n_layers * self.block_params + self.root_params


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU, term by term."""

    states: int
    transient: int
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.states + self.transient + self.activations + self.logits

    def summary(self, gib_per_gpu: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {k: round(v / GIB, 2) for k, v in asdict(self).items()}
        out = {f"{k}_gib": v for k, v in out.items()}
        out["total_gib"] = round(self.total / GIB, 2)
        if gib_per_gpu is not None:
            out["usable_gib"] = round(usable_bytes(gib_per_gpu) / GIB, 2)
        return out


def activation_elements(shape: ModelShape, tokens: int, checkpointing: str) -> int:
    """Elements saved for backward by the blocks, for `tokens` tokens of a micro-batch."""
    d, kv, h = shape.dim, shape.kv_dim, shape.ffn_dim
    whole_block = 12 * d + 3 * kv + 4 * h
    if checkpointing == "full":
        per_block, recompute = d, whole_block
    elif checkpointing == "selective":  # the matmul outputs and SDPA's are kept
        per_block, recompute = 3 * d + 2 * kv + 2 * h, whole_block
    else:
        per_block, recompute = whole_block, 0
    # Backward holds the gradients of one block's activations at a time.
    backward = whole_block
    return tokens * (shape.n_layers * per_block + recompute + backward + 2 * d)


def estimate(
    shape: ModelShape,
    batch: int,
    seq_len: int,
    shard_over: int,
    checkpointing: str = "none",
    cpu_offload: bool = False,
    compute_bytes: int = 2,
) -> Estimate:
    """Per-GPU bytes for one micro-batch of `batch` x `seq_len` with the states sharded
    over `shard_over` ranks. compute_bytes: 2 (bf16, the trainer on GPUs) or 4 (fp32)."""
    states = 0 if cpu_offload else STATE_BYTES_PER_PARAM * shape.params // shard_over
    gathered = shape.root_params + 2 * shape.block_params
    # Unsharded parameters and their gradients; none when nothing is sharded and the
    # compute dtype is the master's (the parameters are used in place).
    transient = 0 if shard_over == 1 and compute_bytes == 4 else 2 * compute_bytes * gathered
    tokens = batch * seq_len
    activations = compute_bytes * activation_elements(shape, tokens, checkpointing)
    upcast = 0 if compute_bytes == 4 else 4
    logits = tokens * shape.vocab_size * (compute_bytes + upcast + 4 + 4)
    return Estimate(states, transient, activations, logits)


def usable_bytes(gib_per_gpu: float) -> int:
    return int(gib_per_gpu * GIB * (1 - RESERVED_SHARE) - RESERVED_FIXED)


def model_shape(spec: JobSpec) -> ModelShape | None:
    """The run's model shape; None when it cannot be known before the job starts (an
    s3:// or hub checkpoint, a preset this table does not know)."""
    if spec.model_name_or_path is not None:
        config = Path(spec.model_name_or_path).expanduser() / "config.json"
        try:
            hf = load_json(config, what="model config", max_bytes=1 << 20)  # bounded
            return ModelShape(
                hf["hidden_size"],
                hf["num_hidden_layers"],
                hf["num_attention_heads"],
                hf.get("num_key_value_heads", hf["num_attention_heads"]),
                hf["vocab_size"],
                hf["intermediate_size"],
                bool(hf.get("tie_word_embeddings", False)),
            )
        except (ToolFailure, KeyError, TypeError):
            return None
    row = PRESET_SHAPES.get(spec.model_type)
    return None if row is None else ModelShape(*row)


def model_label(spec: JobSpec) -> str:
    """The model a job trains and its size, for the plan and the summary."""
    shape = model_shape(spec)
    size = "size read when the job starts" if shape is None else _count(shape.params)
    name = spec.model_name_or_path or spec.model_type
    return f"{name} ({size})"


def preset_label(preset: str) -> str:
    """A preset and its size: "llama_v3_1b (1.24B parameters)"."""
    return f"{preset} ({_count(ModelShape(*PRESET_SHAPES[preset]).params)})"


def alias_note(spec: JobSpec) -> str | None:
    """Said when model_type was an alias (the FSDP-on-EKS document's llama_v3): the size
    it means, and the family's other sizes, so nobody trains 8B by accident."""
    if spec.model_alias is None or spec.model_name_or_path is not None:
        return None
    others = ", ".join(preset_label(p) for p in family_sizes(spec.model_type))
    return f"model_type {spec.model_alias!r} means {preset_label(spec.model_type)}" + (
        f"; the other sizes: {others}" if others else ""
    )


def toy_model_warning(spec: JobSpec) -> str | None:
    """Said on a cluster target when the model is a CPU-sized toy preset (the default)."""
    if spec.model_name_or_path is not None or spec.model_type not in TOY_PRESETS:
        return None
    shape = ModelShape(*PRESET_SHAPES[spec.model_type])
    return (
        f"model_type {spec.model_type!r} is a {shape.n_layers}-layer toy "
        f"({_count(shape.params)}) for CPU tests: set model_type (e.g. llama_v3_8b) "
        "or model_name_or_path"
    )


def _count(params: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if params >= scale:
            return f"{params / scale:.2f}{unit} parameters"
    return f"{params} parameters"


def effective_strategy(spec: JobSpec, shape: ModelShape | None, gib: int | None) -> str:
    """The strategy the trainer runs (its own rule, trainer.rules.resolve_strategy):
    `auto` is hybrid across nodes when one node's GPUs hold the states in half their
    memory, else full."""
    world = spec.num_nodes * spec.gpu_per_node
    params = shape.params if shape is not None else 0
    gpu_bytes = gib * 2**30 if gib is not None else None
    return resolve_strategy(spec.sharding_strategy, world, spec.gpu_per_node, params, gpu_bytes)


def shard_group(spec: JobSpec) -> int:
    world = spec.num_nodes * spec.gpu_per_node
    strategy = effective_strategy(spec, None, None)
    return {"no_shard": 1, "hybrid": spec.gpu_per_node}.get(strategy, world)


def spec_estimate(spec: JobSpec, shape: ModelShape) -> Estimate:
    return estimate(
        shape,
        spec.train_batch_size or DEFAULT_BATCH,
        spec.seq_len or DEFAULT_SEQ,
        shard_group(spec),
        spec.activation_checkpointing or "none",
        bool(spec.cpu_offload),
    )


def fixes(spec: JobSpec, shape: ModelShape, usable: int) -> list[str]:
    """The single knobs that would make this plan fit, most direct first."""
    found = []
    if (spec.activation_checkpointing or "none") != "full":
        full_ac = spec.model_copy(update={"activation_checkpointing": "full"})
        if spec_estimate(full_ac, shape).total <= usable:
            found.append("activation_checkpointing='full'")
    if spec.sharding_strategy in ("full", "shard_grad_op"):
        for nodes in (2, 4, 8, 16, 32, 64, 128):
            more = spec.model_copy(update={"num_nodes": spec.num_nodes * nodes})
            if spec_estimate(more, shape).total <= usable:
                found.append(f"num_nodes={spec.num_nodes * nodes} (states shard over more GPUs)")
                break
    elif spec.sharding_strategy in ("hybrid", "no_shard"):
        full = spec.model_copy(update={"sharding_strategy": "full"})
        if spec_estimate(full, shape).total <= usable:
            found.append("sharding_strategy='full' (shard the states over every GPU)")
    batch = spec.train_batch_size or DEFAULT_BATCH
    for smaller in (batch // 2, batch // 4, 1):
        if 1 <= smaller < batch:
            fewer = spec.model_copy(update={"train_batch_size": smaller})
            if spec_estimate(fewer, shape).total <= usable:
                found.append(f"train_batch_size={smaller} (grad_accum_steps keeps the batch)")
                break
    if not spec.cpu_offload:
        if spec_estimate(spec.model_copy(update={"cpu_offload": True}), shape).total <= usable:
            found.append("cpu_offload=true (states on the host; slower)")
    return found + smaller_presets(spec, shape, usable)


def smaller_presets(spec: JobSpec, shape: ModelShape, usable: int) -> list[str]:
    """The smaller sizes of the job's preset family that fit as the job is set."""
    if spec.model_name_or_path is not None:
        return []
    return [
        f"model_type='{preset}' ({_count(smaller.params)})"
        for preset in family_sizes(spec.model_type)
        if (smaller := ModelShape(*PRESET_SHAPES[preset])).params < shape.params
        and spec_estimate(spec, smaller).total <= usable
    ]


def check_fits(spec: JobSpec, instance_type: str) -> dict[str, Any] | None:
    """The plan's per-GPU estimate for `instance_type` (None when the model's shape is
    unknown before the start); raises GPU_MEMORY_EXCEEDED when it cannot fit."""
    shape = model_shape(spec)
    if shape is None:
        return None
    try:
        gib = instance_spec(instance_type).gib_per_gpu
    except ToolFailure:
        return None  # not in the catalogue: nothing to check against
    spec = spec.model_copy(update={"sharding_strategy": effective_strategy(spec, shape, gib)})
    est, usable = spec_estimate(spec, shape), usable_bytes(gib)
    summary = {"params": shape.params, "gpu_gib": gib, **est.summary(gib)}
    if est.total <= usable:
        return summary
    knobs = fixes(spec, shape, usable)
    raise ToolFailure(
        ErrorCode.GPU_MEMORY_EXCEEDED,
        f"{model_label(spec)} needs about {summary['total_gib']} GiB per GPU, more than the "
        f"{summary['usable_gib']} GiB usable of {instance_type}'s {gib} GiB"
        + (f" ({note})" if (note := alias_note(spec)) else ""),
        ("any one of: " + ", ".join(knobs))
        if knobs
        else "no single knob fits it: combine more nodes, activation_checkpointing='full', "
        "a smaller train_batch_size and cpu_offload, or pick a GPU with more memory",
        {"estimate": summary, "instance_type": instance_type, "fixes": knobs},
    )


# --- an async save's staged copy, in each node's host memory ---------------------------

# What a checkpoint holds of a parameter: the fp32 weight and AdamW's two fp32 moments.
STAGED_BYTES = 12
# Of a node's memory, what the plan may fill (staged copy, /dev/shm, offloaded states):
# the rest is the OS's, the processes' own and the page cache's.
HOST_USABLE_SHARE = 0.8


def async_save_on(spec: JobSpec, gpus: bool) -> bool:
    """Whether the job's saves are async: as asked, else (unset) on GPUs (the trainer
    turns them off at its first save where the node cannot hold the staged copy)."""
    return spec.async_save if spec.async_save is not None else gpus


def staging_bytes(spec: JobSpec, shape: ModelShape) -> int:
    """What one async save stages in host memory on each node: its processes' shares of
    the parameters and Adam moments (STAGED_BYTES a parameter) over the FSDP group, a
    whole copy per node under hybrid sharding (each node holds a replica), a copy per
    process under no_shard."""
    return STAGED_BYTES * shape.params * spec.gpu_per_node // shard_group(spec)


def staging_shm_gib(spec: JobSpec) -> int:
    """GiB of /dev/shm a node needs for an async save's staged copy on GPUs (0: saves
    are synchronous, or the model's size is read only when the job starts)."""
    shape = model_shape(spec)
    if shape is None or not async_save_on(spec, gpus=True):
        return 0
    return math.ceil(staging_bytes(spec, shape) / GIB)


def staging_summary(spec: JobSpec, gpus: bool, shm_gib: float | None) -> str:
    """The plan's line on async saves: whether they are on, what each node stages and
    the /dev/shm that holds it (`shm_gib`: the node's, where the plan knows it)."""
    shape = model_shape(spec)
    if not async_save_on(spec, gpus):
        why = "async_save false" if spec.async_save is False else "CPU: off unless asked"
        return f"off ({why}): each save blocks training for its copy and write"
    if shape is None:
        return "on: its staging size is read when the job starts"
    staged = round(staging_bytes(spec, shape) / GIB, 1)
    if not gpus:
        return f"on: {staged} GiB per node, copied in host memory"
    line = f"on: {staged} GiB staged per node in /dev/shm (pinned shared memory)"
    if shm_gib is None:
        return line + f"; each node needs /dev/shm of {staged} GiB or more"
    if shm_gib < staged:
        return (
            f"on: {staged} GiB staged per node; /dev/shm's {shm_gib:g} GiB cannot hold it, "
            "so it goes to pinned memory outside it (a writer thread)"
        )
    return line + f" of {shm_gib:g} GiB"


def check_host_fits(spec: JobSpec, instance_type: str, shm_gib: float) -> dict[str, Any] | None:
    """What the plan puts in each node's memory: the /dev/shm it mounts (NCCL's share and
    the staged copy) and, with cpu_offload, the states. None where the model's size or
    the instance is unknown; raises HOST_MEMORY_EXCEEDED, with the numbers, where the
    node cannot hold it."""
    shape = model_shape(spec)
    try:
        _, host_gib = host_resources(instance_type)
    except (ToolFailure, KeyError):
        return None
    if shape is None:
        return None
    offloaded = STATE_BYTES_PER_PARAM * shape.params * spec.gpu_per_node // shard_group(spec)
    offloaded_gib = round(offloaded / GIB, 1) if spec.cpu_offload else 0.0
    usable = round(host_gib * HOST_USABLE_SHARE, 1)
    summary = {
        "host_gib": host_gib,
        "usable_gib": usable,
        "shm_gib": shm_gib,
        "offloaded_states_gib": offloaded_gib,
    }
    if shm_gib + offloaded_gib <= usable:
        return summary
    raise ToolFailure(
        ErrorCode.HOST_MEMORY_EXCEEDED,
        f"{model_label(spec)} needs about {shm_gib + offloaded_gib:g} GiB of host memory per "
        f"node (/dev/shm {shm_gib:g} GiB with the async save's staged copy"
        + (f", offloaded states {offloaded_gib:g} GiB" if offloaded_gib else "")
        + f"), more than the {usable:g} GiB usable of {instance_type}'s {host_gib} GiB",
        "set async_save=false (each save then blocks training), shard the states over "
        "more nodes, or pick an instance type with more memory",
        {"host_memory": summary, "instance_type": instance_type},
    )


class NodeRuntime(NamedTuple):
    async_save: str  # staging_summary
    process_group: str  # the trainer's backend string (trainer.backends)


def node_runtime(spec: JobSpec, gpus: bool, shm_gib: float | None) -> NodeRuntime:
    """What every target's plan says of the nodes' runtime: async saves (staging_summary)
    and the trainer's process-group backend(s), both named where cpu_offload adds gloo."""
    device = "cuda" if gpus else "cpu"
    return NodeRuntime(
        staging_summary(spec, gpus, shm_gib),
        process_group_backend(device, bool(spec.cpu_offload)),
    )
