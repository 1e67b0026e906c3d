"""How to sample one request's replies; each setting within its limits (sampling_limits.py)."""

from dataclasses import dataclass, field

from localchat.engine.frontend.structured_output import StructuredOutput
from localchat.engine.sampling_limits import LIMITS, MAX_STOP_LENGTH, MAX_STOP_STRINGS, MIN_TEMPERATURE


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # HF style, over prompt and output tokens
    presence_penalty: float = 0.0  # OpenAI style, over output tokens
    frequency_penalty: float = 0.0
    seed: int | None = None  # reply k of a request samples with seed + k
    max_tokens: int | None = 256  # None: up to max_model_len
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top alternatives per sampled token
    skip_special_tokens: bool = True
    structured: StructuredOutput | None = None  # a grammar the reply must match: JSON, a JSON Schema, tool calls
    # a thinking model's reply (reasoning.py): its thinking apart from its text (CompletionOutput.reasoning), at most
    # this many tokens of it before the engine closes it (None: no limit); a grammar then constrains the answer only.
    # separate_reasoning False: the text as the model wrote it, markers and all (a completion)
    separate_reasoning: bool = True
    thinking_token_budget: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.top_k == -1:
            self.top_k = 0
        for name in LIMITS:
            check_limit(name, getattr(self, name))
        if 0.0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {self.temperature}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        if not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_LENGTH for s in self.stop):
            raise ValueError(f"stop strings must have 1 to {MAX_STOP_LENGTH} characters")
        if not isinstance(self.structured, StructuredOutput | None):
            raise ValueError(f"structured must be a StructuredOutput, got {type(self.structured).__name__}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def seed_for(self, index: int) -> int | None:
        """The seed reply `index` samples with: a request with n=1 and this seed gives the same reply.
        Taken modulo 2**64, the range of sampler.uniform's seed."""
        return None if self.seed is None else (self.seed + index) % 2**64


def check_limit(name: str, value) -> None:
    """A clear ValueError for a value of a LIMITS setting that is out of its range (None passes: unset)."""
    if value is None:
        return
    low, high = LIMITS[name]
    integer = isinstance(low, int) and isinstance(high, int | None)
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float) or value != value:
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}" if high is not None
                         else f"{name} must be at least {low}, got {value}")
