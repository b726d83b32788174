# torch._grouped_mm beside a cuBLAS GEMM of as many FLOPs (torch.mm of a square-ish problem),
# timed as `tilesmith bench` times a variant: input sets rotated past the L2, warm-up calls for
# at least 10 ms, then 25 calls between CUDA events and the median. Routing as the trials draw
# it: each expert's rows a random share of m (uneven; some experts may get none). Run on the
# device beside bench: `python3 docs/grouped_gemm/torch_grouped_mm.py EXPERTSxMxNxK ... [--fp8]`;
# prints a row per shape: milliseconds, TFLOP/s, and the ratio to the GEMM of equal FLOPs. With
# --fp8, torch._scaled_grouped_mm of e4m3 inputs with row-wise scales into bf16 instead (the
# GEMM beside it stays bf16).
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from torch_timing import median_ms  # noqa: E402

shapes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[1:] if a[0].isdigit()]
dtype = torch.bfloat16
fp8 = "--fp8" in sys.argv


def routing(experts, m):
    """Ends of `experts` random shares of m rows, as Offsets::draw makes them."""
    cuts = sorted(torch.randint(0, m + 1, (experts - 1,)).tolist())
    return torch.tensor(cuts + [m], dtype=torch.int32, device="cuda")


print(torch.cuda.get_device_name(), "e4m3 -> bf16, row-wise scales" if fp8 else dtype)
l2 = torch.cuda.get_device_properties(0).L2_cache_size
print(f"{'experts x m x n x k':>26} {'grouped_mm ms':>14} {'TFLOP/s':>8} {'gemm ms':>8} {'ratio':>6}")
for experts, m, n, k in shapes:
    elem = 2
    footprint = (m * k + experts * n * k + m * n) * elem
    sets = min(8, max(2, -(-2 * l2 // footprint)))
    a = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(sets)]
    w = [torch.randn(experts, n, k, device="cuda", dtype=dtype) for _ in range(sets)]
    offs = [routing(experts, m) for _ in range(sets)]
    if fp8:
        a = [x.to(torch.float8_e4m3fn) for x in a]
        w = [x.to(torch.float8_e4m3fn) for x in w]
        sa = [torch.rand(m, device="cuda") + 0.5 for _ in range(sets)]
        sb = [torch.rand(experts, n, device="cuda") + 0.5 for _ in range(sets)]
        grouped = lambda i: torch._scaled_grouped_mm(
            a[i], w[i].transpose(-2, -1), sa[i], sb[i], offs=offs[i], out_dtype=torch.bfloat16, use_fast_accum=True
        )
    else:
        sa = sb = [None] * sets
        grouped = lambda i: torch._grouped_mm(a[i], w[i].transpose(-2, -1), offs=offs[i])
    # Check one result against per-expert products in f32.
    got = grouped(0).float()
    start = 0
    for e, end in enumerate(offs[0].tolist()):
        if end > start:
            want = a[0][start:end].float() @ w[0][e].float().T
            if fp8:
                want = want * sa[0][start:end, None] * sb[0][e][None, :]
            err = ((got[start:end] - want).abs().max() / want.abs().max().clamp(min=1e-6)).item()
            assert err < 2e-2, f"expert {e}: relative error {err}"
        start = end
    flops = 2 * m * n * k
    side = round((m * n * k) ** (1 / 3) / 8) * 8
    x = [torch.randn(side, side, device="cuda", dtype=dtype) for _ in range(2)]
    gemm = lambda i: torch.mm(x[i % 2], x[(i + 1) % 2])
    mine_ms = median_ms(grouped, sets)
    gemm_ms = median_ms(gemm, 2) * flops / (2 * side**3)
    print(f"{f'{experts}x{m}x{n}x{k}':>26} {mine_ms:14.4f} {flops / mine_ms / 1e9:8.1f} {gemm_ms:8.4f} {gemm_ms / mine_ms:6.3f}")
