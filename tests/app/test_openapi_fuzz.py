"""Property-based fuzzing of the served OpenAPI schema with Schemathesis (Hypothesis underneath), bounded: a
few examples per operation against a real `localchat serve`. No answer is a 5xx, and the engine still
generates afterwards."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from support import running_server

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`

EXAMPLES_PER_OPERATION = 6


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory):
    # a short max_model_len bounds the work of any generated request
    with running_server(tmp_path_factory.mktemp("fuzz-home"), kv_blocks=64, args=["--max-model-len", "48"]) as s:
        yield s


@pytest.fixture(scope="module")
def served_schema(fuzzed_server):
    return schemathesis.openapi.from_url(f"{fuzzed_server.url}/api/openapi/openapi.json",
                                         headers={"Authorization": f"Bearer {fuzzed_server.token}"})


schema = schemathesis.pytest.from_fixture("served_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_operation_answers_a_5xx(case, fuzzed_server):
    response = case.call(base_url=fuzzed_server.url, headers={"Authorization": f"Bearer {fuzzed_server.token}"},
                         timeout=120)
    case.validate_response(response, checks=[not_a_server_error])


def test_the_engine_still_generates_after_the_fuzzing(fuzzed_server):
    with fuzzed_server.client() as api:
        reply = api.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
        assert httpx_health(fuzzed_server) == "ready"
    assert fuzzed_server.wait_idle()["localchat_kv_blocks_used"] == 0
    assert "Traceback" not in fuzzed_server.log.read_text()


def httpx_health(server) -> str:
    import httpx

    return httpx.get(f"{server.url}/health").json()["status"]
