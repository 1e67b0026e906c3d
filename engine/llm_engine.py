"""The engine loop: requests in, one batched step at a time, reply deltas out."""

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from localchat.engine.detokenizer import IncrementalDetokenizer
from localchat.engine.kv_cache_manager import KVCacheManager
from localchat.engine.loader import count_weights, load_weights, resolve_model
from localchat.engine.model_runner import ModelRunner
from localchat.engine.outputs import CompletionOutput, RequestOutput, TokenLogprob
from localchat.engine.sampler import Sampler
from localchat.engine.sampling_params import SamplingParams
from localchat.engine.scheduler import Scheduler
from localchat.engine.sequence import Sequence, SequenceStatus

KV_CACHE_BYTES_CPU = 2 * 1024**3
KV_CACHE_SHARE_OF_FREE_GPU_MEMORY = 0.6


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    seqs: list[Sequence] = field(default_factory=list)  # by reply index, as they are forked
    detokenizers: list[IncrementalDetokenizer] = field(default_factory=list)
    logprobs: list[list[TokenLogprob]] = field(default_factory=list)
    streamed: list["Streamed"] = field(default_factory=list)  # per reply

    @property
    def finished(self) -> bool:
        return len(self.seqs) == self.params.n and all(s.is_finished for s in self.seqs)


@dataclass
class Streamed:
    """How much of one reply the deltas have carried so far."""

    text: int = 0
    tokens: int = 0
    logprobs: int = 0
    finished: bool = False


class LLMEngine:
    def __init__(self, model: str | None = None, dtype: str | torch.dtype | None = None, device: str | None = None,
                 block_size: int = 16, num_kv_blocks: int | None = None, enable_prefix_caching: bool = True,
                 max_model_len: int | None = None, max_num_seqs: int = 128, max_num_batched_tokens: int = 2048,
                 attention_backend: str | None = None, quantization: str | None = None,
                 on_progress: Callable[[str, float | None], None] | None = None):
        """quantization="q4_1" runs a Q4_1 GGUF's own 4-bit weights for small steps on CPU (faster decoding,
        close to but not equal to the dense weights' outputs); None keeps dense weights only (exact); "auto"
        is "q4_1" where it applies (a Q4_1 GGUF on the CPU), else None.
        on_progress(stage, fraction or None) hears how loading goes, for a UI to show."""
        progress = on_progress or (lambda stage, fraction: None)
        if quantization not in (None, "q4_1", "auto"):
            raise ValueError(f"unknown quantization {quantization!r}; use None, 'q4_1' or 'auto'")
        if block_size < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must be at least 1")
        progress("preparing the model files (a first start converts the GGUF file)", None)
        source = resolve_model(model)
        self.model_name = source.name
        self.tokenizer = source.tokenizer
        config = source.config
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = _dtype(dtype, self.device)
        limit = config.max_position_embeddings
        window = getattr(config, "sliding_window", None)
        if window and (config.model_type == "mistral" or getattr(config, "use_sliding_window", False)):
            limit = min(limit, window)  # no sliding-window attention: stay within the window, where it is exact
        if max_model_len is not None and not 1 < max_model_len <= limit:
            raise ValueError(f"max_model_len must be in [2, {limit}] for {source.name}, got {max_model_len}")
        if num_kv_blocks is None:
            num_kv_blocks = _default_num_blocks(config, block_size, self.dtype, self.device)
        if num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be at least 1, got {num_kv_blocks}")
        self.max_model_len = min(max_model_len or limit, num_kv_blocks * block_size)
        weights = _reporting(load_weights(source, self.dtype), count_weights(source), progress)
        self.runner = ModelRunner(config, weights, self.dtype, self.device,
                                  block_size, num_kv_blocks, self.max_model_len, attention_backend,
                                  _q4_file(source, quantization, self.device))
        self.kv = KVCacheManager(num_kv_blocks, block_size, enable_prefix_caching,
                                 salt=hash((source.name, str(self.dtype))))
        self.scheduler = Scheduler(self.kv, max_num_seqs, max_num_batched_tokens)
        self.sampler = Sampler()
        self.eos_token_ids = _eos_token_ids(source)
        self.requests: dict[str, Request] = {}
        self._request_ids = itertools.count()
        self.counters = {"prompt_tokens": 0, "cached_prompt_tokens": 0, "generated_tokens": 0}

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        return list(prompt)

    def apply_chat_template(self, messages: list[dict]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams) -> int:
        """The request's max_tokens; a clear ValueError if the engine cannot run it."""
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        vocab = self.runner.model.config.vocab_size
        if not all(isinstance(t, int) and 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        room = self.max_model_len - len(prompt_token_ids)
        if room < 1:
            raise ValueError(f"the prompt has {len(prompt_token_ids)} tokens, more than this engine's "
                             f"max_model_len of {self.max_model_len} allows (with one token for the reply)")
        return min(params.max_tokens or room, room)

    def add_request(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None) -> str:
        prompt_token_ids = self.tokenize(prompt)
        max_tokens = self.check_request(prompt_token_ids, params)
        request_id = request_id if request_id is not None else f"req-{next(self._request_ids)}"
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already running")
        request = Request(request_id, prompt_token_ids, params, max_tokens)
        seq = Sequence(request_id, 0, list(prompt_token_ids), len(prompt_token_ids), params,
                       self._generator(params.seed_for(0)), num_forks_pending=params.n - 1)
        self._track(request, seq)
        self.requests[request_id] = request
        self.scheduler.add(seq)
        return request_id

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self) -> list[RequestOutput]:
        """Run one batch: every scheduled sequence's new tokens in one forward, then sample. Returns the
        deltas of the requests that changed."""
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return []
        sample_rows = [i for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens))
                       if seq.num_computed_tokens + n == len(seq)]
        logits = self.runner.run(batch, sample_rows)
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            seq.num_computed_tokens += n
            self.kv.cache_full_blocks(seq)
        rows, logit_rows = [], []
        for j, i in enumerate(sample_rows):
            seq = batch.seqs[i]
            rows.append(seq)
            logit_rows.append(j)
            if seq.num_output_tokens == 0 and seq.index == 0:
                self._count_prompt(seq)
            if seq.num_forks_pending:  # the prompt is computed once; the other replies share its blocks
                request = self.requests[seq.request_id]
                for k in range(1, request.params.n):
                    child = self.scheduler.fork(seq.fork(k, self._generator(request.params.seed_for(k))))
                    self._track(request, child)
                    rows.append(child)
                    logit_rows.append(j)
                seq.num_forks_pending = 0
        if len(logit_rows) != len(sample_rows):
            logits = logits[torch.tensor(logit_rows, device=logits.device)]
        sampled = self.sampler(logits, rows)
        changed = {}
        for seq, token, logprob in zip(rows, sampled.token_ids, sampled.logprobs):
            self._append(seq, token, logprob)
            changed[seq.request_id] = self.requests[seq.request_id]
        return [self._delta(request) for request in changed.values()]

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request and free its blocks; its last delta, or None for an unknown id."""
        request = self.requests.get(request_id)
        if request is None:
            return None
        for seq in request.seqs:
            if not seq.is_finished:
                self.scheduler.finish(seq, "abort")
        for k in range(len(request.seqs), request.params.n):  # replies that were never forked
            stub = Sequence(request_id, k, [], 0, request.params, status=SequenceStatus.FINISHED,
                            finish_reason="abort")
            self._track(request, stub)
        return self._delta(request)

    def reset(self) -> None:
        """After a failed step: abort every request, forget the prefix cache and clear the KV memory (a step
        cut short may have left blocks half written), then check that every block is free again."""
        for request_id in list(self.requests):
            self.abort(request_id)
        self.kv.pool.reset_cache()
        self.kv.take_block_updates()
        self.runner.kv_cache.zero_()
        pool = self.kv.pool
        if self.requests or self.scheduler.running or self.scheduler.waiting or pool.num_free != len(pool.blocks):
            raise RuntimeError(f"the engine is not idle after a reset: {len(self.requests)} requests, "
                               f"{pool.num_used} blocks in use")

    def stats(self) -> dict[str, int | float]:
        pool = self.kv.pool
        prompt, cached = self.counters["prompt_tokens"], self.counters["cached_prompt_tokens"]
        return {
            "kv_blocks_total": len(pool.blocks),
            "kv_cache_bytes": self.runner.kv_cache.numel() * self.runner.kv_cache.element_size(),
            "kv_blocks_used": pool.num_used,
            "kv_blocks_cached": pool.num_cached_free,
            "kv_blocks_free": pool.num_free,
            "block_size": self.kv.block_size,
            **self.counters,
            "prefix_hit_rate": cached / prompt if prompt else 0.0,
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_preemptions": self.scheduler.num_preemptions,
        }

    def _generator(self, seed: int | None) -> torch.Generator | None:
        return None if seed is None else torch.Generator(self.device).manual_seed(seed)

    def _track(self, request: Request, seq: Sequence) -> None:
        params = request.params
        request.seqs.append(seq)
        request.detokenizers.append(IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids, params.stop,
                                                           params.skip_special_tokens))
        request.logprobs.append([])
        request.streamed.append(Streamed())

    def _count_prompt(self, seq: Sequence) -> None:
        self.counters["prompt_tokens"] += seq.num_prompt_tokens
        self.counters["cached_prompt_tokens"] += seq.num_cached_tokens

    def _append(self, seq: Sequence, token: int, logprob: TokenLogprob | None) -> None:
        request = self.requests[seq.request_id]
        seq.token_ids.append(token)
        self.counters["generated_tokens"] += 1
        detokenizer = request.detokenizers[seq.index]
        detokenizer.add(token)
        if logprob is not None:
            request.logprobs[seq.index].append(logprob)
        params = request.params
        if detokenizer.stopped or token in params.stop_token_ids or (
                not params.ignore_eos and token in self.eos_token_ids):
            self.scheduler.finish(seq, "stop")
        elif seq.num_output_tokens >= request.max_tokens or len(seq) >= self.max_model_len:
            self.scheduler.finish(seq, "length")

    def _delta(self, request: Request) -> RequestOutput:
        outputs = []
        for k, seq in enumerate(request.seqs):
            text = request.detokenizers[k].visible_text(seq.is_finished)
            tokens, logprobs = seq.output_token_ids, request.logprobs[k]
            streamed = request.streamed[k]
            if streamed.finished or (len(text) == streamed.text and len(tokens) == streamed.tokens
                                     and not seq.is_finished):
                continue
            outputs.append(CompletionOutput(
                index=k,
                text=text[streamed.text:],
                token_ids=tokens[streamed.tokens:],
                finish_reason=seq.finish_reason,
                logprobs=logprobs[streamed.logprobs:] if request.params.logprobs is not None else None,
            ))
            request.streamed[k] = Streamed(len(text), len(tokens), len(logprobs), seq.is_finished)
        finished = request.finished
        if finished:
            del self.requests[request.request_id]
        return RequestOutput(request.request_id, request.prompt_token_ids, request.seqs[0].num_cached_tokens,
                             outputs, finished)


def _eos_token_ids(source) -> set[int]:
    """End-of-reply tokens: the tokenizer's, the config's and generation_config.json's (chat models list theirs
    there)."""
    found = [source.tokenizer.eos_token_id, source.config.eos_token_id]
    generation_config = source.weight_files[0].parent / "generation_config.json"
    if generation_config.is_file():
        found.append(json.loads(generation_config.read_text()).get("eos_token_id"))
    ids = set()
    for eos in found:
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return ids


def _q4_file(source, quantization: str | None, device: torch.device):
    if quantization is None or (quantization == "auto" and (source.q4_file is None or device.type != "cpu")):
        return None
    if source.q4_file is None or device.type != "cpu":
        raise ValueError("quantization='q4_1' needs a Q4_1 GGUF model and the CPU (torch's int4 CPU kernel)")
    return source.q4_file


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


def _default_num_blocks(config, block_size: int, dtype: torch.dtype, device: torch.device) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    block_bytes = (2 * config.num_hidden_layers * block_size * config.num_key_value_heads * head_dim
                   * torch.empty(0, dtype=dtype).element_size())
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * KV_CACHE_SHARE_OF_FREE_GPU_MEMORY)
    else:
        budget = KV_CACHE_BYTES_CPU
    return max(1, budget // block_bytes)
