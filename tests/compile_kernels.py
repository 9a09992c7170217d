"""Compile inferlab.algorithms.kernels for sm_90 (H100/H200) without a GPU: Triton IR, PTX, ptxas.

Run by tests/test_kernels.py in a fresh process with TRITON_INTERPRET=0 (the test process
has Triton's interpreter on): ``python tests/compile_kernels.py MODE...``, each mode's
output after a line ``== MODE``. Arguments are specialised as a launch on CUDA tensors
specialises them: pointers and strides divisible by 16 (Triton's "D" specialisation);
without it the compiler cannot vectorise a load and pipelines none.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from inferlab.algorithms import kernels

TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
HOPPER = GPUTarget("cuda", 90, 32)


def compile_for_hopper(fn, pointers: dict[str, str], constexprs: dict, **options):
    """pointers: argument -> type ("*fp16"); 'qk_scale' is fp32, other runtime args i32."""
    signature = {name: "constexpr" if name in constexprs else
                 pointers.get(name, "fp32" if name == "qk_scale" else "i32")
                 for name in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
               if name not in constexprs and (name in pointers or name.startswith("stride"))}
    return triton.compile(ASTSource(fn, signature, constexprs, aligned), target=HOPPER,
                          options=options)


def ptxas_usage(compiled) -> dict:
    """Registers, spill bytes and stack frame of the compiled kernel, from the ptxas Triton
    used for it, run again with -v on its PTX (the compiled object keeps no counts
    without a driver to load it into)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        log = subprocess.run([knobs.nvidia.ptxas_blackwell.path, "-v", "--regAllocOptLevel=2",
                              "--gpu-name=sm_90a", ptx.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True).stderr
    number = {key: int(re.search(pattern, log).group(1)) for key, pattern in (
        ("registers", r"Used (\d+) registers"), ("spill_bytes", r"(\d+) bytes spill stores"),
        ("stack_bytes", r"(\d+) bytes stack frame"))}
    return {**number, "shared_bytes": compiled.metadata.shared}


def _fwd(dtype: torch.dtype, config: kernels.PrefillConfig, head_dim: int, d: int):
    return compile_for_hopper(
        kernels._attn_fwd, dict.fromkeys(["Q", "K", "V", "Out"], f"*{TYPES[dtype]}"),
        {"CAUSAL": True, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "Tiles": None,
         "COUNT_TILES": False, "DOT_PRECISION": kernels._dot_precision(dtype),
         "HEAD_DIM": head_dim, "D": d},
        **kernels._launch_options(config.num_warps, config.num_stages))


def _split(dtype: torch.dtype, config: kernels.DecodeConfig, group: int, head_dim: int,
           d: int):
    scratch = dict.fromkeys(["M", "L", "O"], "*fp32")
    return compile_for_hopper(
        kernels._decode_split, {**dict.fromkeys("QKV", f"*{TYPES[dtype]}"), **scratch},
        {"BLOCK_G": group, "BLOCK_N": config.block_n, "HEAD_DIM": head_dim, "D": d,
         "NUM_STAGES": config.num_stages, "DIRECT": False, "Out": None,
         "DOT_PRECISION": kernels._dot_precision(dtype)},
        **kernels._launch_options(config.num_warps, config.num_stages))


def dtypes() -> None:
    """Every kernel in float16, bfloat16 and float32; prints each dtype whose kernels
    compiled."""
    shape = {"head_dim": 128, "d": 80}  # a padded head dim: the masked loads
    for dtype, name in TYPES.items():
        fwd = _fwd(dtype, kernels.PrefillConfig(64, 32, 4, 3), **shape)
        # fp16/bf16 products on tensor cores (wgmma or mma); fp32 is "ieee", FMA on purpose.
        assert ("mma" in fwd.asm["ptx"]) == (dtype != torch.float32), name
        for group in (1, 16):
            _split(dtype, kernels.DEFAULT_DECODE, group, **shape)
        compile_for_hopper(kernels._decode_merge, {**dict.fromkeys(["M", "L", "O"], "*fp32"),
                                                   "Out": f"*{name}"},
                           {"BLOCK_S": 64, "HEAD_DIM": 128, "D": 80},
                           **kernels._launch_options(4, 1))
        print(dtype.__repr__().removeprefix("torch."), flush=True)


def prefill() -> None:
    """Per tile shape (fp16, head dim 64, causal) the configuration with the most stages,
    nearest the limits: a JSON line of its name, ptxas's usage and the shared estimate."""
    most = {}
    for c in kernels.prefill_configs(64, 2):
        most[(c.block_m, c.block_n)] = c  # listed by stages, ascending: the last is the most
    for c in most.values():
        usage = ptxas_usage(_fwd(torch.float16, c, 64, 64))
        print(json.dumps({"config": c.name, **usage,
                          "shared_estimate": c.shared_bytes(64, 2)}), flush=True)


def decode() -> None:
    """The split kernel per tile and warps at its most stages, for one query and a group
    of 16 rows: a JSON line of whether its key loop's loads became asynchronous copies
    (``ttg.async_copy_global_to_local`` in the IR, ``cp.async`` in the PTX) and usage."""
    for group, queries in ((1, 1), (16, 7)):  # one query; a group of 7 heads, as 28:4
        most = {}
        for c in kernels.decode_configs(queries):  # stages ascending: the last is the most
            most[(c.block_n, c.num_warps)] = c
        for c in most.values():
            compiled = _split(torch.float16, c, group, 64, 64)
            print(json.dumps({"config": c.name, "group": group,
                              "async_copy": "ttg.async_copy_global_to_local"
                                            in compiled.asm["ttgir"],
                              "cp_async": "cp.async" in compiled.asm["ptx"],
                              **ptxas_usage(compiled)}), flush=True)


if __name__ == "__main__":
    assert not kernels.INTERPRETED, "run with TRITON_INTERPRET=0"
    for mode in sys.argv[1:]:
        print(f"== {mode}", flush=True)
        {"dtypes": dtypes, "prefill": prefill, "decode": decode}[mode]()
