"""Compile inferlab.algorithms.kernels for sm_90 (H100/H200) without a GPU: Triton IR, PTX, ptxas.

Run by tests/test_kernels.py in a fresh process with TRITON_INTERPRET=0 (the test
process has Triton's interpreter on). Prints each dtype whose kernels compiled.
"""

from __future__ import annotations

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from inferlab.algorithms import kernels

TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
HOPPER = GPUTarget("cuda", 90, 32)


def compile_for_hopper(fn, pointers: dict[str, str], constexprs: dict, **options):
    """pointers: argument -> type ("*fp16"); 'scale' is fp32, other runtime args i32."""
    signature = {name: "constexpr" if name in constexprs else
                 pointers.get(name, "fp32" if name == "scale" else "i32")
                 for name in fn.arg_names}
    return triton.compile(ASTSource(fn, signature, constexprs), target=HOPPER,
                          options=options)


def main() -> None:
    assert not kernels.INTERPRETED, "run with TRITON_INTERPRET=0"
    shape = {"HEAD_DIM": 128, "D": 80}  # a padded head dim: the masked loads
    for dtype, name in TYPES.items():
        elem = f"*{name}"
        fwd = compile_for_hopper(
            kernels._attn_fwd, dict.fromkeys(["Q", "K", "V", "Out"], elem),
            {"CAUSAL": True, "BLOCK_M": 64, "BLOCK_N": 32, "Tiles": None, "COUNT_TILES": False,
             "DOT_PRECISION": kernels._dot_precision(dtype), **shape},
            **kernels._launch_options(64))
        # fp16/bf16 products on tensor cores (wgmma or mma); fp32 is "ieee", FMA on purpose.
        assert ("mma" in fwd.asm["ptx"]) == (dtype != torch.float32), name
        scratch = dict.fromkeys(["M", "L", "O"], "*fp32")
        compile_for_hopper(kernels._decode_split, {**dict.fromkeys("QKV", elem), **scratch},
                           {"BLOCK_N": 64, **shape}, **kernels._launch_options())
        compile_for_hopper(kernels._decode_merge, {**scratch, "Out": elem},
                           {"BLOCK_S": 64, **shape}, **kernels._launch_options())
        print(dtype.__repr__().removeprefix("torch."), flush=True)


if __name__ == "__main__":
    main()
