"""The engine loop: requests in, one batched step at a time, reply deltas out."""

import dataclasses
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from localchat.engine.config import EngineConfig
from localchat.engine.core.block_pool import root_hash
from localchat.engine.core.kv_cache_manager import KVCacheConfig
from localchat.engine.core.kv_disk_tier import FORMAT_VERSION, KVDiskTier
from localchat.engine.core.request_table import RequestState, RequestTable
from localchat.engine.core.scheduler import Scheduler, StepPace, StopRules
from localchat.engine.core.sequence import Sequence, SequenceStatus, reply_seed
from localchat.engine.core.step_apply import apply_step
from localchat.engine.core.step_outputs import LogitRows
from localchat.engine.frontend.output_processor import OutputProcessor
from localchat.engine.frontend.outputs import RequestOutput
from localchat.engine.frontend.reasoning import PROMPT_TAIL_TOKENS, Phase, find_markers
from localchat.engine.frontend.structured_output import Grammars, Matcher, ReplyGrammar
from localchat.engine.loading.dirs import user_dir
from localchat.engine.loading.loader import count_weights, load_packed, load_weights, model_identity, resolve_model
from localchat.engine.memory import release_freed_memory
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.stats import CPUThreadStats, EngineStats, KernelStats, PinUsage, Warmth
from localchat.engine.worker.model_runner import ModelRunner
from localchat.engine.worker.models import head_dim
from localchat.engine.worker.sampler import Sampler

# The KV cache's default size. On a GPU the engine owns the device, so it takes a share of the memory free after the
# weights (vLLM's gpu_memory_utilization). On the CPU it shares the machine with the user's browser and editor, and
# its blocks become resident as chats fill them and stay so: vLLM's CPU backend reserves a fixed 4 GiB, llama.cpp
# sizes the cache by its context instead, and neither fits a small laptop and a workstation at once. Here: a quarter
# of the memory available when the engine starts (MemAvailable: free memory and the page cache the kernel can drop),
# at least enough for a few chats of any model and at most vLLM's 4 GiB, beyond which more blocks only keep older
# chats that the disk tier keeps anyway. A 16 GB laptop with half its memory free gets 2 GiB.
KV_CACHE_SHARE_OF_AVAILABLE_MEMORY = 0.25
KV_CACHE_BYTES_CPU_MIN = 256 * 1024**2
KV_CACHE_BYTES_CPU_MAX = 4 * 1024**3
KV_CACHE_SHARE_OF_FREE_GPU_MEMORY = 0.6
# and at most this many tokens whatever the memory: more than any set of chats needs, and a small model's blocks are
# so small that its share of the memory would make millions of them, each an object of the pool (seconds to build)
KV_CACHE_MAX_TOKENS = 2**20


class LLMEngine:
    """step() reads as its phases: schedule, run (and count the computed tokens, starting the other replies of
    prompts just computed), sample and verify, apply, emit. Requests come in through add_request and leave through
    their last delta (or abort)."""

    def __init__(self, config: EngineConfig | None = None,
                 on_progress: Callable[[str, float | None], None] | None = None):
        """on_progress(stage, fraction or None) hears how loading goes, for a UI to show."""
        config = config or EngineConfig()
        self.config = config
        progress = on_progress or (lambda stage, fraction: None)
        progress("reading the model files", None)
        source = resolve_model(config.model)
        release_freed_memory()  # what reading the tokenizer parsed and dropped, before the weights come
        self.model_name = source.name
        self.tokenizer = source.tokenizer
        model_config = source.config.get_text_config()  # a multimodal model's text part
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = _dtype(config.dtype, self.device)
        num_kv_blocks = self._load_runner(source, model_config, progress)
        fingerprint = self._fingerprint(source)
        self.disk = _disk_tier(config, fingerprint, self.runner)
        kv_cache = KVCacheConfig(num_kv_blocks, config.block_size, config.enable_prefix_caching, fingerprint,
                                 self.disk, self.runner.read_block, self.runner.block_view)
        eos_token_ids = _eos_token_ids(source, model_config)
        self.scheduler = Scheduler(kv_cache, config.max_num_seqs, config.max_num_batched_tokens,
                                   StepPace(config.decode_step_target_s, config.step_limit_s),
                                   StopRules(frozenset(eos_token_ids), self.max_model_len), config.speculative)
        self.sampler = Sampler()
        self.reasoning_markers = find_markers(self.tokenizer)  # a thinking model's <think> and </think>
        self.requests = RequestTable()
        self.output = OutputProcessor(self.tokenizer, self.requests, self.reasoning_markers)
        self.grammars = Grammars(self.tokenizer, model_config.vocab_size, eos_token_ids)
        self._request_ids = itertools.count()
        release_freed_memory()  # what a first start's conversion of the weights dropped

    def _load_runner(self, source, model_config, progress: Callable[[str, float | None], None]) -> int:
        """Choose the weights' form and the cache's dtype, size the KV cache (max_model_len with it), load the weights
        (converting a GGUF on its first start) and build the model runner; the cache's blocks."""
        config, limit = self.config, model_config.max_position_embeddings
        if config.max_model_len is not None and not 1 < config.max_model_len <= limit:
            raise ValueError(f"max_model_len must be in [2, {limit}] for {source.name}, got {config.max_model_len}")
        self.packed = _runs_packed(source, config.quantization, self.device)
        self.kv_dtype = (_dtype(config.kv_cache_dtype, self.device) if config.kv_cache_dtype is not None
                         else torch.bfloat16 if self.packed else self.dtype)
        num_kv_blocks = config.num_kv_blocks or default_num_blocks(model_config, config.block_size, self.kv_dtype,
                                                                   self.device)
        self.max_model_len = min(config.max_model_len or limit, num_kv_blocks * config.block_size)
        if source.needs_conversion(self.packed):
            progress(f"converting {source.gguf_file.name} for this machine (its first start only)", None)
        source.ensure_converted(self.packed)
        total = count_weights(source, self.packed)
        weights = _reporting(load_packed(source) if self.packed else load_weights(source, self.dtype), total, progress)
        self.runner = ModelRunner(model_config, weights, self.packed, self.dtype, self.kv_dtype, self.device,
                                  config.block_size, num_kv_blocks, self.max_model_len, config.attention_backend,
                                  config.cpu_threads)
        return num_kv_blocks

    def _fingerprint(self, source) -> str:
        """What a block's K and V depend on besides its tokens: no block is shared across a change of any of these."""
        return "/".join(map(str, ("localchat-kv", FORMAT_VERSION, model_identity(source), self.dtype, self.kv_dtype,
                                  "packed" if self.packed else "dense", self.config.block_size, self.device.type,
                                  self.runner.backend.__name__)))

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        return list(prompt)

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            variables: dict | None = None) -> list[int]:
        """The prompt's token ids, with the function tools (OpenAI's shape) for a template that renders them, and
        values of the template's own variables (chat_template_kwargs: enable_thinking, ...)."""
        ids = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                                 **(variables or {}))
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams) -> int:
        """The request's max_tokens; a clear ValueError if the engine cannot run it (a bad schema among others:
        its grammar is compiled here)."""
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        vocab = self.runner.model.config.vocab_size
        if not all(isinstance(t, int) and 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        room = self.max_model_len - len(prompt_token_ids)
        if room < 1:
            raise ValueError(f"the prompt has {len(prompt_token_ids)} tokens, more than this engine's "
                             f"max_model_len of {self.max_model_len} allows (with one token for the reply)")
        if params.structured is not None:
            self.grammars.check(params.structured)
        return min(params.max_tokens or room, room)

    def add_request(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None,
                    matcher: Matcher | None = None, draft_sources: list[list[int]] | None = None) -> str:
        """matcher: the first reply's place in its grammar, made beforehand (AsyncLLM makes it on the caller's
        thread: a grammar can take seconds to compile, and the engine's thread would stop every reply meanwhile).
        draft_sources: token lists besides the prompt that the replies may copy from (the sibling replies of a
        regenerate or an edit), for drafts (speculator.py)."""
        prompt_token_ids = self.tokenize(prompt)
        max_tokens = self.check_request(prompt_token_ids, params)
        if params.top_k >= self.runner.model.config.vocab_size:  # the whole vocabulary, or more (no upper limit: one
            params = dataclasses.replace(params, top_k=0)  # past 64 bits overflowed the sampler's tensor): none
        request_id = request_id if request_id is not None else f"req-{next(self._request_ids)}"
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already running")
        if matcher is None and params.structured is not None:
            matcher = self.grammars.matcher(params.structured)
        phase = self._first_phase(prompt_token_ids, params)
        # a thinking reply's grammar waits for the answer: the thinking is free
        grammar = ReplyGrammar(matcher, phase not in (None, Phase.ANSWER)) if matcher is not None else None
        seq = Sequence(request_id, 0, list(prompt_token_ids), len(prompt_token_ids), params,
                       reply_seed(params, 0), grammar, num_siblings_pending=params.n - 1, max_tokens=max_tokens)
        self.requests.add(RequestState(request_id, prompt_token_ids, params, first_phase=phase))
        self.output.track(seq)
        self.scheduler.add(seq, draft_sources)
        return request_id

    def _first_phase(self, prompt_token_ids: list[int], params: SamplingParams) -> Phase | None:
        """Where a thinking model's replies start after this prompt (reasoning.py); None: nothing to take apart."""
        if self.reasoning_markers is None or not params.separate_reasoning:
            return None
        tail = self.tokenizer.decode(prompt_token_ids[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
        return self.reasoning_markers.phase_after(tail)

    def end_thinking(self, request_id: str) -> bool:
        """A request's replies close their thinking now (the engine writes the closing marker at each one's next
        token) and go on with their answers; False for a request with no thinking to close."""
        return self.requests.end_thinking(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self) -> list[RequestOutput]:
        """One batch, in phases, each handing the next a typed result: schedule (what runs: ScheduledBatch); run (one
        forward over its new tokens and drafts, from plain data: ModelInput), whose tokens the scheduler then counts,
        starting the other replies of prompts just computed (SampleRows); sample and verify (a token for each sequence
        whose tokens are all computed, and one after each draft token the sampler agreed with: VerifiedTokens); apply
        (each reply takes its tokens: AppliedStep, recorded in the request table; a request that failed ends); emit
        (the deltas of the requests that changed)."""
        started = time.perf_counter()
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return []
        rows = self.scheduler.commit_and_fork(LogitRows(self.runner.run(batch.model_input()), batch))
        applied = apply_step(self.scheduler.verify(self.sampler, rows), self.scheduler, self.output)
        self.requests.record(applied)
        self._end_failed(applied.failed)
        self.scheduler.pace.observe(batch, time.perf_counter() - started)
        return self._emit(applied.seqs)

    def _end_failed(self, failed: dict[str, str]) -> None:
        """The requests whose grammar failed in the step end, every reply."""
        for request_id in failed:
            self._end(request_id)

    def _emit(self, seqs: list[Sequence]) -> list[RequestOutput]:
        """The deltas of the requests of these sequences, once each."""
        return [self._delta(request_id) for request_id in dict.fromkeys(seq.request_id for seq in seqs)]

    def _delta(self, request_id: str) -> RequestOutput:
        """What changed in a request since its last delta; a finished request leaves the table."""
        delta = self.output.delta(self.requests[request_id])
        if delta.finished:
            self.requests.remove(request_id)
        return delta

    def abort(self, request_id: str, save: bool = True) -> RequestOutput | None:
        """Stop a request and free its blocks (kept on disk unless save is False); its last delta, or None for an
        unknown id."""
        if request_id not in self.requests:
            return None
        self._end(request_id, save)
        return self._delta(request_id)

    def _end(self, request_id: str, save: bool = True) -> None:
        """Finish every reply of a request with "abort", the replies not yet started too."""
        request = self.requests[request_id]
        for seq in request.seqs:
            self.scheduler.end(seq, save)
        for k in range(len(request.seqs), request.params.n):  # replies that were never started
            self.output.track(Sequence(request_id, k, [], 0, request.params, status=SequenceStatus.FINISHED,
                                       finish_reason="abort"))

    def reset(self) -> None:
        """After a failed step: drop every request and start the KV memory afresh, every block free and new (a step
        cut short may have left blocks half written or half counted): the block pool clears each block's memory on
        its first use, as at the start, so the cache (gigabytes) is not zeroed at once, which took seconds and made
        every page of it resident. The disk tier keeps what it wrote."""
        self.requests.clear()
        self.scheduler.reset()

    def forget(self, dropped: list[list[int]], kept: list[list[int]]) -> int:
        """Drop the cached blocks of the token sequences `dropped` (a deleted conversation's branches) that none of
        `kept` (every other conversation's) shares, from memory and disk; how many blocks that was."""
        return self.scheduler.forget(dropped, kept)

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix in memory, as vLLM's reset_prefix_cache (the disk tier keeps its own)."""
        self.scheduler.reset_prefix_cache()

    def warmth(self, key: str, token_ids: list[int]) -> Warmth:
        """Where the history token_ids of a chat (named by `key`, e.g. its conversation's id) is: in memory, on disk or
        to compute, and what it adds to the next first token's wait. Each key's block hashes are kept between calls
        and only a chat's new blocks are hashed; the cache is found by a few lookups whatever the length. Callable
        from any thread (an estimate: the pool is read as it is, not between steps)."""
        return self.scheduler.warmth(key, list(token_ids))

    def pin(self, key: str, token_ids: list[int]) -> PinUsage:
        """Keep a chat's history warm (its blocks are evicted last; blocks on disk are read back now), in place of the
        key's earlier pin; the pins' use after it. A ValueError (PinRefused) if the pins would hold more than their
        budget (PIN_SHARE_OF_CACHE of the cache). Between steps only."""
        self.scheduler.pin(key, list(token_ids))
        return self.pin_usage()

    def unpin(self, key: str) -> PinUsage:
        """The key's pin goes (its blocks back to the LRU, as the most recently used); the pins' use after it."""
        self.scheduler.unpin(key)
        return self.pin_usage()

    def pin_usage(self) -> PinUsage:
        """What pinned chats keep and the budget (read from any thread)."""
        return self.scheduler.pin_usage(self.runner.block_bytes)

    def close(self) -> None:
        """Finish writing the disk tier (the engine may be used no further)."""
        if self.disk is not None:
            self.disk.close()

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters and gauges (read between steps)."""
        scheduler, cpu_threads = self.scheduler, self.runner.cpu_threads
        return EngineStats(
            prompt_tokens=scheduler.prompt_tokens, cached_prompt_tokens=scheduler.cached_prompt_tokens,
            generated_tokens=self.output.generated_tokens, num_running=len(scheduler.running),
            num_waiting=len(scheduler.waiting), num_preemptions=scheduler.num_preemptions, kv=scheduler.kv_usage,
            kv_cache_bytes=self.runner.kv_cache_bytes, speculation=dataclasses.replace(scheduler.speculation),
            cpu=CPUThreadStats(cpu_threads.threads, cpu_threads.others) if cpu_threads is not None else None,
            disk=self.disk.stats if self.disk is not None else None, kernels=self._kernel_stats(),
            pins=self.pin_usage())

    def _kernel_stats(self) -> KernelStats | None:
        choice = self.runner.kernels
        if choice is None:
            return None
        return KernelStats(choice.decode, choice.prompt, choice.prompt_rows, dataclasses.asdict(choice.peaks))


def _eos_token_ids(source, model_config) -> set[int]:
    """End-of-reply tokens: the tokenizer's, the (text) config's and generation_config.json's (chat models list
    theirs there)."""
    found = [source.tokenizer.eos_token_id, getattr(model_config, "eos_token_id", None)]
    generation_config = source.folder / "generation_config.json"
    if generation_config.is_file():
        found.append(json.loads(generation_config.read_text()).get("eos_token_id"))
    ids = set()
    for eos in found:
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return ids


def _disk_tier(config: EngineConfig, fingerprint: str, runner: ModelRunner) -> KVDiskTier | None:
    """The KV cache's disk tier, if asked for. Blocks are read straight into the cache's memory: a cache in CPU
    memory only, so far (a GPU needs a host-memory tier between, see the README)."""
    if not (config.kv_disk_bytes and config.enable_prefix_caching) or runner.device.type != "cpu":
        return None
    root = Path(config.kv_disk_dir) if config.kv_disk_dir else user_dir("cache") / "kv"
    return KVDiskTier(root, root_hash(fingerprint).hex(), config.kv_disk_bytes, runner.block_shape, runner.kv_dtype)


def _runs_packed(source, quantization: str, device: torch.device) -> bool:
    """A GGUF on the CPU runs its own (packed) weights unless quantization="none" asks for dense float ones;
    "packed" insists (and fails elsewhere)."""
    possible = source.gguf_file is not None and device.type == "cpu"
    if quantization == "packed" and not possible:
        raise ValueError("quantization='packed' needs a GGUF model on the CPU (torch's weight-only CPU kernels)")
    return possible and quantization != "none"


def _reporting(weights: Iterator, total: int, progress: Callable[[str, float | None], None]) -> Iterator:
    for i, item in enumerate(weights):
        progress("loading weights", i / max(total, 1))
        yield item
    progress("allocating the KV cache", None)


def _dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        names = {"float32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16, "half": torch.float16}
        if dtype not in names:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
        return names[dtype]
    return dtype


def default_num_blocks(config, block_size: int, dtype: torch.dtype, device: torch.device) -> int:
    """The blocks of cpu_kv_cache_bytes() on the CPU, of a share of the free memory on a GPU; KV_CACHE_MAX_TOKENS at
    most."""
    block_bytes = (2 * config.num_hidden_layers * block_size * config.num_key_value_heads * head_dim(config)
                   * torch.empty(0, dtype=dtype).element_size())
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * KV_CACHE_SHARE_OF_FREE_GPU_MEMORY)
    else:
        budget = cpu_kv_cache_bytes(available_memory())
    return max(1, min(budget // block_bytes, KV_CACHE_MAX_TOKENS // block_size))


def cpu_kv_cache_bytes(available: int | None) -> int:
    """The KV cache's default size on the CPU for a machine with `available` bytes of memory (None: not known, which
    gets vLLM's fixed size); see KV_CACHE_SHARE_OF_AVAILABLE_MEMORY."""
    if available is None:
        return KV_CACHE_BYTES_CPU_MAX
    return min(max(int(available * KV_CACHE_SHARE_OF_AVAILABLE_MEMORY), KV_CACHE_BYTES_CPU_MIN), KV_CACHE_BYTES_CPU_MAX)


def available_memory() -> int | None:
    """Bytes of memory the engine can take without swapping: Linux's MemAvailable, elsewhere the physical memory
    (sysconf); None where neither can be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
