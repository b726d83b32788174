# torch's eager row-wise operations beside a device copy of the same bytes, timed as
# `tilesmith bench` times a variant: input sets rotated past the L2 (at least twice its size),
# warm-up calls on every set for at least 10 ms, then 25 calls between CUDA events, all enqueued
# before one wait, and the median; the copy timed in turns with each operation. Bytes are
# counted as the families' `work.bytes` count them (each input read once, each output written
# once). Run on the device beside bench: `python3 docs/rowwise/torch_rowwise.py ROWSxCOLS ...
# [--dtype bf16|f32] [--only NAME,...]`; prints a row per operation and shape.
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from torch_timing import median_ms  # noqa: E402

args = sys.argv[1:]
dtype = torch.float32 if "--dtype" in args and args[args.index("--dtype") + 1] == "f32" else torch.bfloat16
only = args[args.index("--only") + 1].split(",") if "--only" in args else None
shapes = [tuple(int(v) for v in a.split("x")) for a in args if "x" in a and a[0].isdigit()]
elem = torch.tensor([], dtype=dtype).element_size()


def operations(rows, cols, sets):
    """name -> (bytes moved, call on set i)."""
    x = [torch.randn(rows, cols, device="cuda", dtype=dtype) * 4 for _ in range(sets)]
    w = torch.randn(cols, device="cuda", dtype=dtype)
    b = torch.randn(cols, device="cuda", dtype=dtype)
    t = [torch.randint(0, cols, (rows,), device="cuda") for _ in range(sets)]
    dloss = torch.randn(rows, device="cuda")
    n = rows * cols * elem
    ops = {
        "softmax": (2 * n, lambda i: torch.softmax(x[i], dim=1)),
        "rmsnorm": (2 * n, lambda i: F.rms_norm(x[i], (cols,), w, 1e-6)),
        "layernorm": (2 * n, lambda i: F.layer_norm(x[i], (cols,), w, b, 1e-5)),
        "cross_entropy": (n, lambda i: F.cross_entropy(x[i], t[i], reduction="none")),
    }
    # The backward as autograd runs it: the gradient of the per-row loss with respect to the
    # logits, into a fresh buffer. Its graph (a copy of the logits, the forward) only where asked.
    if not only or "cross_entropy_backward" in only:
        leaves = [v.clone().requires_grad_(True) for v in x]
        losses = [F.cross_entropy(v, t[i], reduction="none") for i, v in enumerate(leaves)]
        ops["cross_entropy_backward"] = (
            2 * n,
            lambda i: torch.autograd.grad(losses[i], leaves[i], dloss, retain_graph=True),
        )
    return ops


print(torch.cuda.get_device_name(), dtype)
l2 = torch.cuda.get_device_properties(0).L2_cache_size
for rows, cols in shapes:
    sets = min(16, max(2, -(-2 * l2 // (rows * cols * elem))))
    ops = operations(rows, cols, sets)
    for name, (moved, call) in ops.items():
        if only and name not in only:
            continue
        src = [torch.empty(moved // 2, dtype=torch.uint8, device="cuda") for _ in range(sets)]
        dst = [torch.empty(moved // 2, dtype=torch.uint8, device="cuda") for _ in range(sets)]
        copy = lambda i: dst[i].copy_(src[i])
        # In turns: copy, operation, copy, operation, ...; the medians of each.
        mine, theirs = [], []
        for _ in range(3):
            theirs.append(median_ms(copy, sets))
            mine.append(median_ms(call, sets))
        op_ms, copy_ms = sorted(mine)[1], sorted(theirs)[1]
        print("| torch %s | %dx%d | %.4f ms | %.0f GB/s | copy %.0f GB/s | %.2f of copy |" % (
            name, rows, cols, op_ms, moved / op_ms / 1e6, moved / copy_ms / 1e6, copy_ms / op_ms))
