"""Every attention implementation the timing stages run, declared once.

An entry says what the rest of the project needs to know about one implementation: the
name its rows carry (``impl``, also its name in the config's ``implementations`` lists),
the timing stages that run it, the devices it can be timed on, the function a stage
calls, what sizes a row of it (its tile or its split count), whether it is fused (never
writes the T x T scores) and its colour in every figure. A Triton kernel's entry adds its
launch configurations (``Launch``): the list ``inferlab tune`` times and the one that
runs before any tuning.

Who reads it: ``python -m inferlab generate`` writes the schemas' ``impl`` enums and the
config schema's ``implementations`` enums from it; the prefill and decode stages build
their cases from it; the figures take their colours and labels from it. A new kernel is
its code and one entry here.

Calling conventions, by stage and ``sized_by``: prefill ``run(q, k, v, causal)``, with
``"block"`` ``run(q, k, v, causal, block_q, block_k)``, a kernel
``run(q, k, v, causal, config)``; decode ``run(q, k, v, splits)``, a kernel
``run(q, k, v, splits, config)``. PyTorch's SDPA backends have no ``run``: the harness
forces ``scaled_dot_product_attention`` to ``sdpa_backend`` (``measurement.backends``),
and the config names them all ``sdpa`` with a ``backends`` list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inferlab.algorithms import kernels
from inferlab.algorithms.attention import naive_attention, tiled_attention, tiled_attention_fast
from inferlab.algorithms.partials import splitkv_decode

TIMING_STAGES = ("prefill", "decode")
SDPA = "sdpa"  # the config's name for every SDPA backend at once


@dataclass(frozen=True)
class Launch:
    """What a Triton kernel's entry adds: its launch configurations."""

    configs: Callable[..., tuple]  # (head_dim, itemsize) -> the list `inferlab tune` times
    default: object                # the configuration that runs before any tuning
    parse: Callable[[str], object]  # a configuration from its name (the tuning file's)
    # None where it can be timed on a device, else the row's status as data
    not_timeable: Callable[[str], dict | None] = kernels.not_timeable


@dataclass(frozen=True)
class Implementation:
    name: str
    stages: tuple[str, ...]         # the timing stages that run it
    colour: str                     # its colour in every figure (lighter: larger tile)
    run: Callable | None = None     # the function a stage calls (module docstring)
    devices: tuple[str, ...] = ("cpu", "cuda")
    sized_by: str | None = None     # "block": block_q, block_k; "splits": splits
    fused: bool = False             # never writes the T x T scores to memory
    sdpa_backend: str | None = None  # PyTorch's SDPA forced to this backend
    launch: Launch | None = None    # a Triton kernel's launch configurations

    @property
    def fused_sdpa(self) -> bool:
        """The rows' ``fused_sdpa``: PyTorch's fused kernel, the chapter's "fused kernel"."""
        return self.fused and self.sdpa_backend is not None

    def unavailable(self, device: str) -> dict | None:
        """None when it can be timed on ``device``, else the row's status as data."""
        if self.launch is not None:
            return self.launch.not_timeable(device)
        if device not in self.devices:  # only CUDA-only entries exist
            return {"status": "unavailable", "cause": "no_cuda_device"}
        return None


def _sdpa(backend: str, colour: str, fused: bool) -> Implementation:
    # which of them run on a device is PyTorch's to say: the backend probe asks it
    return Implementation(f"sdpa_{backend}", TIMING_STAGES, colour, fused=fused,
                          sdpa_backend=backend)


IMPLEMENTATIONS: dict[str, Implementation] = {i.name: i for i in (
    Implementation("naive", ("prefill",), "#222222", naive_attention),
    Implementation("tiled", ("prefill",), "#d62728", tiled_attention, sized_by="block"),
    Implementation("tiled_fast", ("prefill",), "#9467bd", tiled_attention_fast,
                   sized_by="block"),
    _sdpa("flash", "#1f77b4", fused=True),
    _sdpa("efficient", "#2ca02c", fused=True),
    _sdpa("cudnn", "#17becf", fused=True),
    _sdpa("math", "#8c564b", fused=False),
    Implementation("triton_flash", ("prefill",), "#e377c2", kernels.run_prefill,
                   devices=("cuda",), sized_by="block", fused=True,
                   launch=Launch(kernels.prefill_configs, kernels.DEFAULT_PREFILL,
                                 kernels.PrefillConfig.parse)),
    Implementation("splitkv", ("decode",), "#ff7f0e", splitkv_decode, sized_by="splits"),
    Implementation("triton_decode", ("decode",), "#bcbd22", kernels.run_decode,
                   devices=("cuda",), sized_by="splits", fused=True,
                   launch=Launch(kernels.decode_configs, kernels.DEFAULT_DECODE,
                                 kernels.DecodeConfig.parse)),
)}


def get(name: str) -> Implementation:
    """The entry of ``name``; an unknown name is a ValueError listing them."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"impl={name!r} is not an implementation; expected one of "
                         f"{list(IMPLEMENTATIONS)} (inferlab.algorithms.implementations)")
    return IMPLEMENTATIONS[name]


def of_stage(stage: str) -> list[Implementation]:
    """The implementations ``stage`` runs, in declaration order."""
    return [i for i in IMPLEMENTATIONS.values() if stage in i.stages]


def config_names(stage: str) -> list[str]:
    """The names ``stage``'s config may list in ``implementations``: each entry's own, and
    ``sdpa`` once, where the first backend stands."""
    names: list[str] = []
    for i in of_stage(stage):
        name = SDPA if i.sdpa_backend else i.name
        if name not in names:
            names.append(name)
    return names
