"""Property-based fuzzing of the served OpenAPI schema with Schemathesis (Hypothesis underneath), bounded: a
few examples per operation against a real `localchat serve`, with every check Schemathesis has. No answer is a 5xx,
every answer is what the schema documents (status, content type, headers, body, the Allow of an OPTIONS), a
request the schema allows is taken and one it does not is refused; and the engine still generates afterwards."""

from collections.abc import Sequence

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from support import SECOND_MODEL_NAME, SESSION_HOME, running_server, second_model_dir, stream_api

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

EXAMPLES_PER_OPERATION = 6

# A request the schema allows may still be refused (400) for what no schema can state: the prompt must fit the
# model's context (--max-model-len 36 below: one short message and a few tokens of reply) and vocabulary (token
# ids); a tool_call_id must name a call of the message it answers; the tools of a request or a conversation have
# distinct names (JSON Schema can say that items differ, not that one of their fields does), and a named tool_choice
# names one of them; /v1: the roles of the messages follow the chat template, prompts times n are at most 64; a
# summary's request must fit beside the branch; a continue takes a reply cut short, not a message; a pull names a repo
# OWNER/NAME, one at a time; and an upload must hold readable text (an image is 415, a document larger than the
# context 400). Ollama's chat and generate refuse images and what does not fit as those do. The rules between fields
# that a schema can state, it states (openapi.BODY_RULES: a required tool call needs tools and excludes a JSON format,
# ...). These operations may answer 400 (or 415) to a request the schema allows; all else is checked as everywhere.
REFUSED_FOR_WHAT_NO_SCHEMA_STATES = [
    "/api/conversations", "/api/conversations/{conversation_id}", "/api/conversations/{conversation_id}/messages",
    "/api/conversations/{conversation_id}/messages/{message_id}/edit",
    "/api/conversations/{conversation_id}/messages/{message_id}/regenerate",
    "/api/conversations/{conversation_id}/messages/{message_id}/continue", "/api/models/pull",
    "/api/conversations/{conversation_id}/summarize", "/api/documents", "/v1/chat/completions", "/v1/completions",
    "/api/chat", "/api/generate",
]
# Ollama's routes for what this app never does: refusing is all they do, by design. Each answers 400 with Ollama's
# error, the one answer its schema documents (no 2xx), so Schemathesis's positive_data_acceptance reports each of
# them (benchmarks/schema_fuzz.py lists them); the other checks hold for them as for every route.
REFUSED_BY_DESIGN = ["/api/embed", "/api/embeddings", "/api/pull", "/api/push", "/api/create", "/api/copy",
                     "/api/delete"]
POSITIVE_STATUSES_WITH_400 = ["2xx", "3xx", "400", "401", "403", "404", "409", "415", "429", "5xx"]


def config_text(conversation_id: str | None = None, message_id: str | None = None, doomed_id: str | None = None,
                models: Sequence[str] = (), may_refuse: Sequence[str] = (*REFUSED_FOR_WHAT_NO_SCHEMA_STATES,
                                                                          *REFUSED_BY_DESIGN)) -> str:
    """Schemathesis's configuration (TOML; benchmarks/schema_fuzz.py runs its CLI with it): the 400 of the paths
    may_refuse (by default both lists above: this test checks everything but those; the benchmark reports the
    refusals by design), real ids in
    the paths (random ones would only meet 404s): a conversation with a message, and for DELETE a conversation of its
    own (else every operation after it would meet a 404); and most bodies' `model` one of `models` (the served one,
    by its names in /v1 and in Ollama's API), else a body naming a model would only meet a 404. Without ids, the ids
    are Schemathesis's own (its stateful phase follows the schema's links to the resources it creates)."""
    parameters = [f'"path.conversation_id" = "{conversation_id}"', f'"path.message_id" = "{message_id}"'
                  ] if conversation_id is not None else []
    if models:
        parameters.append('"body.model" = { dictionary = "models", probability = 0.9 }')
    text = "seed = 1\n"
    if models:
        text += f"[dictionaries.models]\nvalues = {list(models)!r}\n"
    if parameters:
        text += "[parameters]\n" + "\n".join(parameters) + "\n"
    text += f"""
[[operations]]
include-path = {list(may_refuse)!r}
checks.positive_data_acceptance.expected-statuses = {POSITIVE_STATUSES_WITH_400!r}
"""
    if conversation_id is not None:
        text += f"""
[[operations]]
include-method = "DELETE"
include-path = "/api/conversations/{{conversation_id}}"
parameters = {{ "path.conversation_id" = "{doomed_id}" }}
"""
    return text


def config(conversation_id: str, message_id: str, doomed_id: str, models: Sequence[str]) -> SchemathesisConfig:
    """Every check, with config_text's settings."""
    return SchemathesisConfig.from_str(config_text(conversation_id, message_id, doomed_id, models))


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory):
    # tiny-llama (2 layers of random weights, the embedded model's tokenizer and template) writes its replies fast,
    # and a short max_model_len bounds the work of any generated request: the HTTP layer is what is checked here
    model = second_model_dir(SESSION_HOME / "cache" / "test-references" / "second-model") / SECOND_MODEL_NAME
    with running_server(tmp_path_factory.mktemp("fuzz-home"), kv_blocks=64,
                        args=["--max-model-len", "36", "--model", str(model)]) as server:
        server.model = str(model)  # its name in Ollama's API: a folder's name is its path
        yield server


@pytest.fixture(scope="module")
def served_schema(fuzzed_server):
    with fuzzed_server.client() as api:  # replies of one token, unless a request's settings say otherwise
        conversation_id, doomed_id = (api.post("/api/conversations", json={"settings": {"max_tokens": 1}}).json()["id"]
                                      for _ in range(2))
        events = stream_api(api, f"/api/conversations/{conversation_id}/messages", {"content": "Hi"})
        models = [api.get("/v1/models").json()["data"][0]["id"], fuzzed_server.model]
    return schemathesis.openapi.from_url(f"{fuzzed_server.url}/api/openapi/openapi.json",
                                         config=config(conversation_id, events[0]["message"]["id"], doomed_id,
                                                       models),
                                         headers={"Authorization": f"Bearer {fuzzed_server.token}"})


schema = schemathesis.pytest.from_fixture("served_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_answer_conforms_to_the_schema(case, fuzzed_server):
    case.call_and_validate(base_url=fuzzed_server.url, headers={"Authorization": f"Bearer {fuzzed_server.token}"},
                           timeout=120)


def test_the_engine_still_generates_after_the_fuzzing(fuzzed_server):
    with fuzzed_server.client() as api:
        reply = api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
        assert httpx.get(f"{fuzzed_server.url}/health").json()["status"] == "ready"
    assert fuzzed_server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert "Traceback" not in fuzzed_server.log.read_text()
