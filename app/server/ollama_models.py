"""The models of this machine as Ollama's API names and describes them.

A model's Ollama name is the name the engine serves it by, with the tag `latest`: the embedded model is
`SmolLM2-135M-Instruct:latest`, a GGUF file `<its name without .gguf>:latest`, a Hugging Face repo
`<owner>/<repo>:latest`, a model folder `<folder name>:latest`. A request may leave out `:latest`, write the name in
any case, or give the name `localchat models` lists (a path)."""

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from localchat.app.protocol.conversations import SAMPLING_FIELDS
from localchat.app.protocol.ollama import (
    DURATION_PATTERN,
    DURATION_UNITS,
    ListedModel,
    ModelDetails,
    RunningModel,
    ShowResponse,
)
from localchat.app.sampling_defaults import sampling_defaults
from localchat.app.server.sampling import OLLAMA_NAMES
from localchat.engine.loading.gguf_header import read_header
from localchat.engine.loading.model_catalog import LocalModel

TAG = "latest"
NEVER_EXPIRES = "2318-08-28T00:00:00Z"  # Ollama's expires_at of a model kept loaded for good
GGUF_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def ollama_name(model: LocalModel) -> str:
    return f"{model.served_name}:{TAG}"


def find_model(models: list[LocalModel], name: str) -> LocalModel | None:
    wanted = name.strip()
    full = (wanted if ":" in wanted.rsplit("/", 1)[-1] else f"{wanted}:{TAG}").lower()
    return next((m for m in models if ollama_name(m).lower() == full or m.name == wanted), None)


def keep_alive_seconds(value: int | float | str | None) -> float | None:
    """Ollama's keep_alive in seconds: a number of seconds or a duration ("5m", "1h30m", "-1s"); negative: for
    good. None where the request gives none. A ValueError for anything else (the schema's DURATION_PATTERN)."""
    if value is None or isinstance(value, int | float):
        return value
    if re.fullmatch(DURATION_PATTERN, value) is None:
        raise ValueError(f"keep_alive: {value!r} is not a duration (such as \"5m\", \"1h\", \"-1\" or 0)")
    if value.lstrip("-")[-1:].isdigit():
        return float(value)
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(value))
    return -seconds if value.startswith("-") else seconds


_UNITS = dict(zip(DURATION_UNITS, (3600.0, 60.0, 1.0, 1e-3, 1e-6, 1e-6, 1e-6, 1e-9)))  # seconds
_PART = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({'|'.join(sorted(_UNITS, key=len, reverse=True))})")  # "ms" before "m"


def details(model: LocalModel) -> ModelDetails:
    family = model.architecture or "unknown"
    return ModelDetails(format=model.format, family=family, families=[family],
                        parameter_size=_parameter_size(model.parameters),
                        quantization_level=model.file_type or model.quantization or "unquantized")


def _parameter_size(count: int | None) -> str:
    """134515008 -> "134.5M", 1073809408 -> "1.1B" (Ollama's way)."""
    if not count:
        return "unknown"
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{suffix}"
    return str(count)


def _modified_at(model: LocalModel) -> str:
    return datetime.fromtimestamp(model.path.stat().st_mtime, UTC).isoformat().replace("+00:00", "Z")


def _digest(model: LocalModel) -> str:
    """Of the file's path, size and time, not of its bytes (hashing a 5 GB file per listing would take a minute)."""
    return hashlib.sha256(f"{model.path}:{model.size_bytes}:{model.path.stat().st_mtime_ns}".encode()).hexdigest()


def listed(model: LocalModel) -> ListedModel:
    name = ollama_name(model)
    return ListedModel(name=name, model=name, modified_at=_modified_at(model), size=model.size_bytes,
                       digest=_digest(model), details=details(model))


def running(model: LocalModel, context_length: int, expires_at: float | None) -> RunningModel:
    """The loaded model; expires_at: when keep_alive unloads it (epoch seconds), None: never."""
    name = ollama_name(model)
    expires = NEVER_EXPIRES if expires_at is None else \
        datetime.fromtimestamp(expires_at, UTC).isoformat().replace("+00:00", "Z")
    return RunningModel(name=name, model=name, size=model.memory_bytes or model.size_bytes, digest=_digest(model),
                        details=details(model), expires_at=expires, size_vram=0, context_length=context_length)


def shown(model: LocalModel, verbose: bool) -> ShowResponse:
    """/api/show: the details, the chat template (Jinja, as the model's files give it: Ollama's would be a Go
    template), the parameters a request gets by default, and the model's metadata."""
    info, template = _gguf_info(model.path, verbose) if model.format == "gguf" else _folder_info(model.path)
    info = {"general.architecture": model.architecture, "general.parameter_count": model.parameters, **info}
    capabilities = ["completion"]
    if "tools" in template:
        capabilities.append("tools")
    if "<think>" in template or "enable_thinking" in template:
        capabilities.append("thinking")
    defaults = sampling_defaults(model.sampling)  # what a request for it that names no option gets
    parameters = "\n".join(f"{OLLAMA_NAMES.get(k, k):<30} {getattr(defaults, k)}" for k in SAMPLING_FIELDS)
    modelfile = (f"# localchat does not use Modelfiles: the model's own files give its template and settings\n"
                 f"# sampling defaults (PARAMETER): {defaults.source}\n"
                 f"FROM {model.path}\n")
    return ShowResponse(modelfile=modelfile, parameters=parameters, template=template, details=details(model),
                        model_info=info, capabilities=capabilities, modified_at=_modified_at(model))


def _gguf_info(path: Path, verbose: bool) -> tuple[dict, str]:
    metadata = read_header(path).metadata
    template = metadata.get("tokenizer.chat_template")
    info = {k: v for k, v in metadata.items()
            if k != "tokenizer.chat_template" and (verbose or k not in GGUF_ARRAYS)}
    return info, template if isinstance(template, str) else ""


def _folder_info(folder: Path) -> tuple[dict, str]:
    def read(name: str) -> dict:
        try:
            return json.loads((folder / name).read_text())
        except (OSError, ValueError):
            return {}

    config = read("config.json")
    arch = config.get("model_type", "unknown")
    info = {f"{arch}.{k}": v for k, v in config.items() if isinstance(v, int | float | str | bool)}
    template = read("tokenizer_config.json").get("chat_template")
    if not isinstance(template, str):
        try:
            template = (folder / "chat_template.jinja").read_text()
        except OSError:
            template = ""
    return info, template
