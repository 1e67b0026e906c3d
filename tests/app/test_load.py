"""32 concurrent streaming clients on a real `localchat serve`: all finish with complete replies, no error,
no leaked KV block."""
import asyncio
import json
import time

import httpx
import pytest

pytestmark = pytest.mark.slow  # a real `localchat serve` under load: left out of `./dev test --fast`

CLIENTS = 32
MAX_TOKENS = 8
DEADLINE_S = 240  # the whole load run is bounded; on an idle 2-core machine it takes a few seconds


async def one_client(client: httpx.AsyncClient, i: int) -> dict:
    body = {"messages": [{"role": "user", "content": f"Client {i}: name a fruit."}], "max_tokens": MAX_TOKENS,
            "temperature": 1.0, "seed": i, "stream": True, "stream_options": {"include_usage": True}}
    if i % 4 == 3:  # a quarter use the conversation API, the rest /v1 (a chat named by its client: no title to write)
        cid = (await client.post("/api/conversations", json={"title": f"Load client {i}"})).json()["id"]
        async with client.stream("POST", f"/api/conversations/{cid}/messages",
                                 json={"content": body["messages"][0]["content"],
                                       "settings": {"max_tokens": MAX_TOKENS, "seed": i}}) as response:
            assert response.status_code == 200
            events = [json.loads(line[5:]) async for line in response.aiter_lines() if line.startswith("data:")]
        (done,) = [e["message"] for e in events if e["type"] == "done"]
        return {"text": done["content"], "finish": done["finish_reason"],
                "tokens": done["stats"]["completion_tokens"]}
    text, finish, usage = "", None, None
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line async for line in response.aiter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line[5:])
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            text += choice["delta"].get("content") or ""
            finish = choice["finish_reason"] or finish
    return {"text": text, "finish": finish, "tokens": usage["completion_tokens"]}


async def run_load(server) -> list:
    limits = httpx.Limits(max_connections=CLIENTS + 4)
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                                 timeout=DEADLINE_S, limits=limits) as client:
        return await asyncio.wait_for(asyncio.gather(*(one_client(client, i) for i in range(CLIENTS))),
                                      DEADLINE_S)


def test_32_concurrent_streams(server):
    before = server.wait_idle()
    started = time.monotonic()
    results = asyncio.run(run_load(server))
    elapsed = time.monotonic() - started
    assert len(results) == CLIENTS
    for result in results:
        assert result["finish"] in ("stop", "length"), result
        assert result["text"] and 0 < result["tokens"] <= MAX_TOKENS
        assert result["finish"] == "stop" or result["tokens"] == MAX_TOKENS  # complete: ended by EOS or the limit
    after = server.wait_idle()
    assert after["localchat_kv_blocks_used"] == 0  # no leaked block
    assert after["localchat_requests_running"] == 0 and after["localchat_requests_waiting"] == 0
    generated = after["localchat_generated_tokens_total"] - before["localchat_generated_tokens_total"]
    assert generated == sum(r["tokens"] for r in results)
    print(f"{CLIENTS} clients, {generated:.0f} tokens in {elapsed:.1f} s")
