# The timing the torch scripts beside `tilesmith bench` share, as bench times a variant: warm-up
# calls on every input set for at least 10 ms, then 25 calls between CUDA events, all enqueued
# before one wait, and the median in milliseconds. `fn(i)` runs the call on input set i.
import time

import torch


def median_ms(fn, sets):
    start = time.perf_counter()
    i = 0
    while i < max(3, sets) or time.perf_counter() - start < 0.01:
        fn(i % sets)
        i += 1
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(25)]
    for k, (begin, end) in enumerate(events):
        begin.record()
        fn((i + k) % sets)
        end.record()
    torch.cuda.synchronize()
    times = sorted(begin.elapsed_time(end) for begin, end in events)
    return times[len(times) // 2]
