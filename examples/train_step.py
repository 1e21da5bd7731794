"""A small attention block's training steps: three kinds of CuTe DSL kernel in one program,
for ``cute-prof record`` to profile unchanged.

Forward: the QKV projection on quack's GEMM, FlashAttention-4's causal forward, the output
projection on this repository's warp-specialised GEMM (a kernel of the user's own,
``examples/ws_gemm.py``). Backward (loss: the output's mean square): the user's GEMM, FA4's
backward, quack's GEMM for the QKV weight gradient. One line per step (the loss, a gradient
checksum) to compare a recorded run with a plain one::

    python examples/train_step.py --steps 6
    cute-prof record -o run -k flash -k gemm --launch-skip 2 --launch-count 2 -- \\
        examples/train_step.py --steps 6
    cute-prof summary run

Needs a Hopper GPU and the wheels ``requirements-fa4.txt`` lists.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# quack keeps compiled kernels on disk by default; the recorder turns that off itself, and a
# plain run does the same so both compile in the process
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def quack_gemm(a, b, out):
    """``out = a @ b`` on quack's GEMM (a: m x k, b: k x n), one fixed tile config (no
    autotuning: a tuner would compile and launch every candidate)."""
    from quack.gemm_config import GemmConfig
    from quack.gemm_interface import gemm_tuned

    config = GemmConfig(tile_m=128, tile_n=192, pingpong=True, cluster_m=2, cluster_n=1,
                        is_dynamic_persistent=False, device_capacity=9)
    gemm_tuned.fn(a, b, out, config=config)
    return out


class Block:
    """Weights and one training step of an attention block (no autograd through the GEMMs:
    their gradients are the GEMMs written out, so every GEMM is a CuTe DSL kernel)."""

    def __init__(self, batch: int, seqlen: int, heads: int, head_dim: int, seed: int = 0):
        from examples.ws_gemm import CompiledWsGemm

        self.b, self.s, self.h, self.d = batch, seqlen, heads, head_dim
        width = heads * head_dim
        gen = torch.Generator(device="cuda").manual_seed(seed)
        scale = width ** -0.5
        self.x = torch.randn(batch * seqlen, width, device="cuda", dtype=torch.bfloat16,
                             generator=gen)
        self.w_qkv = (torch.randn(width, 3 * width, device="cuda", generator=gen) * scale).bfloat16()
        # the user GEMM computes a @ b.T: keep W_o as (out, in) and its transpose for backward
        self.w_o = (torch.randn(width, width, device="cuda", generator=gen) * scale).bfloat16()
        self.w_o_t = self.w_o.t().contiguous()
        self.x_t = self.x.t().contiguous()
        self.user_gemm = CompiledWsGemm()

    def step(self) -> tuple[float, float]:
        from flash_attn.cute.interface import flash_attn_func

        b, s, h, d = self.b, self.s, self.h, self.d
        width = h * d
        qkv = quack_gemm(self.x, self.w_qkv, torch.empty(b * s, 3 * width, device="cuda",
                                                         dtype=torch.bfloat16))
        q, k, v = (t.detach().contiguous().requires_grad_(True)
                   for t in qkv.view(b, s, 3, h, d).unbind(2))
        attn = flash_attn_func(q, k, v, causal=True)
        attn = attn[0] if isinstance(attn, tuple) else attn
        y = self.user_gemm(attn.detach().reshape(b * s, width).contiguous(), self.w_o)
        loss = y.float().pow(2).mean()
        # backward: dL/dy, then through the output projection (the user's GEMM again)
        grad_y = (2.0 / y.numel()) * y.float()
        grad_attn = self.user_gemm(grad_y.bfloat16().contiguous(), self.w_o_t)
        attn.backward(grad_attn.view(b, s, h, d))  # FlashAttention-4's backward
        grad_qkv = torch.stack([q.grad, k.grad, v.grad], dim=2).reshape(b * s, 3 * width)
        grad_w_qkv = quack_gemm(self.x_t, grad_qkv.bfloat16().contiguous(),
                                torch.empty(width, 3 * width, device="cuda", dtype=torch.bfloat16))
        checksum = float(grad_w_qkv.float().abs().sum())
        return float(loss), checksum


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("train_step.py needs a CUDA GPU", file=sys.stderr)
        return 2
    block = Block(args.batch, args.seqlen, args.heads, args.head_dim)
    for step in range(args.steps):
        loss, checksum = block.step()
        print(f"step {step}: loss {loss:.6e} grad_w_qkv |sum| {checksum:.6e}", flush=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
