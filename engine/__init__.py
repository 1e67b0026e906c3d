"""localchat's inference engine: a paged KV cache shared across requests, turns and branches."""

from localchat.engine.async_llm import AsyncLLM
from localchat.engine.llm import LLM
from localchat.engine.outputs import CompletionOutput, RequestOutput, TokenLogprob
from localchat.engine.sampling_params import SamplingParams

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "RequestOutput", "CompletionOutput", "TokenLogprob"]
