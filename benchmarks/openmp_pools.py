"""Why only the engine's thread runs torch (engine/worker/cpu_threads.py): one small int4 product (SmolLM2's gate_up,
one row) timed on a thread that is the process's only torch thread, then again after another thread has run torch
operations (and so keeps an OpenMP pool of its own), and under OMP_WAIT_POLICY=PASSIVE.

    python benchmarks/openmp_pools.py

Each case runs in a fresh process: libgomp's pools live as long as their threads.
"""

import os
import subprocess
import sys

from common import report

CHILD = """
import threading, time, torch
torch.set_num_threads(2)

def product_us():
    x = torch.randn(1, 576).bfloat16()
    codes = torch.randint(0, 16, (3072, 576), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    scales = torch.randn(576 // 32, 3072, 2).bfloat16()
    mm = lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, scales)
    for _ in range(200):
        mm()
    start = time.perf_counter()
    for _ in range(3000):
        mm()
    return (time.perf_counter() - start) / 3000 * 1e6

if {other_pool}:
    torch.randn(4000, 4000).sum()  # the main thread runs torch: it keeps an OpenMP pool
result = []
worker = threading.Thread(target=lambda: result.append(product_us()))
worker.start()
worker.join()
print(result[0])
"""

CASES = {
    "the only torch thread": (False, {}),
    "after another thread ran torch": (True, {}),
    "the only torch thread, OMP_WAIT_POLICY=PASSIVE": (False, {"OMP_WAIT_POLICY": "PASSIVE"}),
}


def main() -> None:
    rows = []
    for case, (other_pool, env) in CASES.items():
        environment = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
        out = subprocess.run([sys.executable, "-c", CHILD.format(other_pool=other_pool)], env=environment,
                             capture_output=True, text=True, check=True)
        rows.append({"case": case, "us per product": round(float(out.stdout.split()[-1]), 1)})
    report("openmp_pools", rows, {"threads": 2})


if __name__ == "__main__":
    main()
