"""How many threads the engine's CPU kernels use: all of its cores on a quiet machine, fewer while other processes
keep some of them busy.

torch's OpenMP threads meet at a barrier after every operation, hundreds of times per decode step. When another
process holds one of two cores, the thread that lost its core holds up the others at each barrier, and a step takes
several times as long (a decode step here: 11 ms quiet, 39 ms with one core busy on two threads, 13 ms on one).
So the engine measures, between steps, how much CPU time the other processes of the machine take on its cores
(/proc/stat's busy time less this process's own) and runs on the cores left to it, rounded.

Kernels give the same bits on any thread count (packed_linear.py's and attention.py's invariance), so this changes
speed only, never a reply.

A second thread of this process that ran torch operations would keep its own OpenMP pool, and libgomp, counting more
threads than cores, then stops waiting for work by spinning: every operation pays a wake-up (a decode step took
twice as long). The engine runs its kernels on one thread; others copy tensors through numpy
(core/kv_disk_tier.py's single_threaded_copy).
"""

import os
import time

import torch

CHECK_EVERY_S = 0.5  # how often the others' load is measured (between steps)


class CPUThreads:
    """Chooses torch's thread count for the thread that runs the model; call adjust() between steps from it.

    fixed: always that many threads (no measuring); None: adapt, between 1 and torch's thread count at start."""

    def __init__(self, fixed: int | None = None):
        self.most = fixed or torch.get_num_threads()
        self.fixed = fixed is not None
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._stat_lines = {f"cpu{core}" for core in self.cores}  # /proc/stat's lines of these cores
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else None  # read with /proc/stat alone
        self.others = 0.0  # cores' worth of CPU time that other processes took in the last interval
        self.threads = self.most
        self._last = self._sample()
        self._last_check = time.monotonic()

    def adjust(self) -> int:
        """Set torch's thread count for the calling thread (at most every CHECK_EVERY_S); the count in use."""
        now = time.monotonic()
        if not self.fixed and self._last is not None and now - self._last_check >= CHECK_EVERY_S:
            self._last_check = now
            sample = self._sample()
            if sample is not None:
                (busy, own, wall), (busy0, own0, wall0) = sample, self._last
                self.others = max(0.0, ((busy - busy0) - (own - own0)) / max(wall - wall0, 1e-3))
                self._last = sample
            self.threads = max(1, min(self.most, int(len(self.cores) - self.others + 0.5)))
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        return self.threads

    def _sample(self) -> tuple[float, float, float] | None:
        """(busy CPU seconds of this process's cores since boot, this process's CPU seconds, monotonic time);
        None where /proc/stat cannot be read (not Linux): then the count stays fixed."""
        try:
            with open("/proc/stat") as stat:
                lines = stat.read().splitlines()
        except OSError:
            return None
        busy = 0
        for line in lines:
            name, *fields = line.split()
            if name in self._stat_lines:  # user nice system idle iowait irq softirq steal ...
                values = [int(v) for v in fields[:8]]
                busy += sum(values) - values[3] - values[4]
        return busy / self._tick, time.process_time(), time.monotonic()
