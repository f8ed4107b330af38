"""The fake Messages API answers the way the real CLI needs (tests/fake_anthropic.py), over real HTTP."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from fake_anthropic import FakeAnthropic, plan
from harness import wait_for

CANARY = "liveness check — run this one command and do not reply: touch '/tmp/state dir/acks/abc123'"
TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}]


@pytest.fixture
def fake():
    with FakeAnthropic() as served:
        yield served


def post(fake, body, path="/v1/messages?beta=true", timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", "x-api-key": "sk-test-secret"})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type"), response.read().decode()
    finally:
        conn.close()


def sse(text):
    """The (event, data) pairs of an SSE body."""
    out = []
    for chunk in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


def turn(*messages, stream=True, tools=TOOLS):
    body = {"model": "claude-opus-5-5", "max_tokens": 100, "stream": stream, "messages": list(messages)}
    if tools:
        body["tools"] = tools
    return body


def user(*texts):
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def rebuilt(events):
    """The content blocks a client rebuilds from the stream, and the stop reason."""
    blocks, partial, stop = {}, {}, None
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in partial:
            blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            stop = data["delta"]["stop_reason"]
    return [blocks[i] for i in sorted(blocks)], stop


def test_a_touch_request_gets_a_bash_tool_call_in_the_messages_api_event_order(fake):
    status, kind, body = post(fake, turn(user("<system-reminder>\nnoise\n</system-reminder>\n", CANARY)))
    assert status == 200 and kind == "text/event-stream"
    events = sse(body)
    names = [name for name, _ in events]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    [block], stop = rebuilt(events)
    assert stop == "tool_use"
    assert block["type"] == "tool_use" and block["name"] == "Bash" and block["id"].startswith("toolu_")
    assert block["input"]["command"] == "touch '/tmp/state dir/acks/abc123'"


def test_the_tool_result_gets_a_short_text_and_anything_else_is_echoed(fake):
    call = plan_for(CANARY)[0]
    after = turn(user(CANARY), {"role": "assistant", "content": [call]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": ""}]})
    [block], stop = rebuilt(sse(post(fake, after)[2]))
    assert block == {"type": "text", "text": "done."} and stop == "end_turn"
    [block], stop = rebuilt(sse(post(fake, turn({"role": "user", "content": "hello MARK-7"}))[2]))
    assert block["text"] == "heard: hello MARK-7" and stop == "end_turn"


def plan_for(text):
    from fake_anthropic import Request

    return plan(Request("POST", "/v1/messages", {}, turn(user(text))))


def test_side_requests_without_tools_get_plain_text_even_when_they_ask_to_touch(fake):
    [block], stop = rebuilt(sse(post(fake, turn(user(CANARY), tools=None))[2]))
    assert block["type"] == "text" and stop == "end_turn"


def test_a_request_that_does_not_stream_gets_one_json_message(fake):
    status, kind, body = post(fake, turn(user(CANARY), stream=False))
    message = json.loads(body)
    assert status == 200 and kind == "application/json"
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert message["content"][0]["input"]["command"].startswith("touch ")


def test_start_up_probes_and_token_counts_get_minimal_answers(fake):
    assert json.loads(post(fake, {"messages": []}, "/v1/messages/count_tokens?beta=true")[2]) == {"input_tokens": 10}
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=30)
    for method, path in (("GET", "/v1/models"), ("HEAD", "/"), ("GET", "/api/anything")):
        conn.request(method, path)
        response = conn.getresponse()
        response.read()
        assert response.status == 200
    conn.close()
    assert [(r.method, r.path) for r in fake.requests][-3:] == [("GET", "/v1/models"), ("HEAD", "/"),
                                                               ("GET", "/api/anything")]


def test_every_request_is_recorded_with_its_turns_and_without_the_key(fake):
    post(fake, turn(user("first")))
    post(fake, turn(user("first"), {"role": "assistant", "content": "heard: first"}, user("second")))
    second = fake.main_requests()[-1]
    assert second.user_texts() == ["first", "second"]
    assert "heard: first" in second.texts()
    assert "x-api-key" not in second.headers and "sk-test-secret" not in json.dumps(second.headers)


def test_silent_holds_the_request_until_cleared(fake):
    fake.silent = True
    answers = []
    caller = threading.Thread(target=lambda: answers.append(post(fake, turn(user("are you there")))))
    caller.start()
    try:
        wait_for(lambda: fake.held() == 1, 30, what="the request held")
        caller.join(1)
        assert caller.is_alive() and answers == []
    finally:
        fake.silent = False
    caller.join(30)
    [block], _ = rebuilt(sse(answers[0][2]))
    assert block["text"] == "heard: are you there" and fake.held() == 0


def test_slow_keeps_the_stream_open_with_pings_then_answers(fake):
    fake.slow = 1.5
    events = sse(post(fake, turn(user("take your time")))[2])
    assert events[0][0] == "message_start" and ("ping", {"type": "ping"}) in events
    assert rebuilt(events)[0][0]["text"] == "heard: take your time"
