"""The engine's thread count: all cores on a quiet machine, fewer while other processes keep some busy."""

import os
import subprocess
import sys
import time

import pytest
import torch

from localchat.engine.core.kv_disk_tier import single_threaded_copy
from localchat.engine.worker import cpu_threads
from localchat.engine.worker.cpu_threads import CPUThreads


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def governor(monkeypatch, samples: list[tuple[float, float, float]], cores: int = 2, most: int = 2) -> CPUThreads:
    """A CPUThreads over two cores that reads `samples` (busy CPU s, own CPU s, time) instead of /proc/stat."""
    feed = iter(samples)
    monkeypatch.setattr(CPUThreads, "_sample", lambda self: next(feed))
    monkeypatch.setattr(cpu_threads, "CHECK_EVERY_S", 0)
    torch.set_num_threads(most)
    threads = CPUThreads()
    threads.cores = list(range(cores))
    return threads


def test_a_quiet_machine_gets_every_thread(monkeypatch):
    # the engine itself takes both cores; others take 5% of one
    threads = governor(monkeypatch, [(0, 0, 0), (2.05, 2.0, 1.0), (4.1, 4.0, 2.0)])
    assert [threads.adjust(), threads.adjust()] == [2, 2]
    assert torch.get_num_threads() == 2


def test_a_core_taken_by_another_process_drops_a_thread_and_it_comes_back(monkeypatch):
    # seconds 0-2: another process holds a whole core; seconds 2-5: it has stopped
    samples = [(0, 0, 0), (2.0, 1.0, 1.0), (4.0, 2.0, 2.0), (5.0, 3.0, 3.0), (6.0, 4.0, 4.0), (7.0, 5.0, 5.0)]
    threads = governor(monkeypatch, samples)
    counts = [threads.adjust() for _ in range(5)]
    assert counts[:2] == [1, 1] and torch.get_num_threads() in (1, 2)
    assert counts[-1] == 2 and torch.get_num_threads() == 2


def test_a_fixed_count_is_kept(monkeypatch):
    monkeypatch.setattr(cpu_threads, "CHECK_EVERY_S", 0)
    threads = CPUThreads(1)
    assert threads.adjust() == 1 and torch.get_num_threads() == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) != 2,
                    reason="measures a real busy core on a two-core machine")
def test_a_real_busy_loop_is_seen(monkeypatch):
    monkeypatch.setattr(cpu_threads, "CHECK_EVERY_S", 0.2)
    torch.set_num_threads(2)
    threads = CPUThreads()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 5
        while threads.adjust() != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threads.threads == 1, f"others measured at {threads.others:.2f} cores"
    finally:
        busy.kill()
        busy.wait()


def test_single_threaded_copy_fills_a_strided_view():
    cache = torch.zeros(3, 2, 5, 4, dtype=torch.bfloat16)
    source = torch.randn(3, 2, 4).bfloat16()
    single_threaded_copy(cache[:, :, 2], source)
    assert torch.equal(cache[:, :, 2], source) and not cache[:, :, [0, 1, 3, 4]].any()
    with pytest.raises(ValueError):
        single_threaded_copy(cache[:, :, 2], source.float())
