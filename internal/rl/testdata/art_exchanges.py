"""Writes art_exchanges.json, art_exchanges_edges.json and their _histories.json with ART 0.5.23's own classes.

art_exchanges.json is the body ART's ServerlessBackend posts to
POST /v1/preview/training-jobs (serverless/client.py: trajectory_group.model_dump(mode="json"),
which is exclude_defaults), for trajectories of Chat Completions exchanges as its tracing
helpers capture them. art_exchanges_histories.json is what ART's
Trajectory.chat_completions_histories() makes of each trajectory: per history, each
message's source, ["request", i] or ["choice", exchange, choice_index].

Run with Python >= 3.12 and pydantic, openai, anthropic installed, with the openpipe-art
0.5.23 wheel unpacked so that `art` imports without its heavy __init__ (an empty
art/__init__.py beside the unpacked art/trajectories):
    PYTHONPATH=<dir with art/> python art_exchanges.py
"""

import json
from datetime import UTC, datetime, timedelta

from openai.types.chat import ChatCompletion

from art.trajectories import (
    ChatCompletionsExchange,
    ChatCompletionsMessageSource,
    Trajectory,
    TrajectoryExchanges,
    TrajectoryGroup,
)

T0 = datetime(2026, 11, 27, 6, 0, 0, 123456, tzinfo=UTC)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
SYSTEM = {"role": "system", "content": "You answer briefly."}
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def logprobs(ids, base):
    return {
        "content": [
            {"token": f"token_id:{i}", "bytes": None, "logprob": base - 0.01 * k, "top_logprobs": []}
            for k, i in enumerate(ids)
        ],
        "refusal": None,
    }


def choice(index, message, ids, base, finish="stop"):
    return {"index": index, "finish_reason": finish, "message": message, "logprobs": logprobs(ids, base)}


def exchange(seconds, messages, choices, tools=None):
    request = {"model": "flywheel-test", "messages": messages, "logprobs": True, "temperature": 1.0}
    if tools is not None:
        request["tools"] = tools
    response = ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{seconds}",
            "object": "chat.completion",
            "created": 1795000000 + seconds,
            "model": "flywheel-test",
            "choices": choices,
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )
    return ChatCompletionsExchange(
        start_time=T0 + timedelta(seconds=seconds),
        end_time=T0 + timedelta(seconds=seconds, milliseconds=500),
        request=request,
        response=response,
    )


# A: a tool call, its answer, and the answer asked for again (a regeneration).
tool_call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
tool_result = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
turn2 = [SYSTEM, USER, tool_call, tool_result]
a = Trajectory(
    exchanges=TrajectoryExchanges(
        chat_completions=[
            exchange(0, [SYSTEM, USER], [choice(0, tool_call, [40, 41, 42, 43], -0.5, "tool_calls")], TOOLS),
            exchange(2, turn2, [choice(0, {"role": "assistant", "content": "Sunny again."}, [50, 51, 52], -0.25)], TOOLS),
            exchange(1, turn2, [choice(0, {"role": "assistant", "content": "It is sunny."}, [44, 45, 46, 47], -0.75)], TOOLS),
        ]
    ),
    reward=1.0,
    metrics={"turns": 2},
)
# B: two choices of one call (n=2), which sampled the same tokens; no tools.
b = Trajectory(
    exchanges=TrajectoryExchanges(
        chat_completions=[
            exchange(
                5,
                [USER],
                [
                    choice(1, {"role": "assistant", "content": "Rain."}, [60, 61, 62], -0.125),
                    choice(0, {"role": "assistant", "content": "Rain."}, [60, 61, 62], -0.375),
                ],
            )
        ]
    ),
    reward=0.0,
)
# C: the client sent its earlier answer back without the reasoning the model
# sampled: not the same message, so another history, in which that answer is
# still the sampled choice (ART's lineage by the messages' visible parts).
think = {"role": "user", "content": "2+2?"}
c = Trajectory(
    exchanges=TrajectoryExchanges(
        chat_completions=[
            exchange(7, [think], [choice(0, {"role": "assistant", "content": "4", "reasoning_content": "add"}, [70, 71], -0.5)]),
            exchange(
                8,
                [think, {"role": "assistant", "content": "4"}, {"role": "user", "content": "+1?"}],
                [choice(0, {"role": "assistant", "content": "5"}, [72], -0.5)],
            ),
        ]
    ),
    reward=0.25,
)
group = TrajectoryGroup([a, b, c])


def write(name, group):
    body = {
        "model_id": "model-1",
        "trajectory_groups": [group.model_dump(mode="json")],
        "experimental_config": {"learning_rate": 1e-5},
    }
    with open(f"{name}.json", "w") as f:
        json.dump(body, f, indent=1)
        f.write("\n")
    histories = []
    for t in group.trajectories:
        exchanges = t.exchanges.chat_completions
        out = []
        for h in t.chat_completions_histories():
            srcs = []
            for s in h.message_sources:
                assert isinstance(s, ChatCompletionsMessageSource)
                if s.choice_index is None:
                    srcs.append(["request", s.request_index])
                else:
                    srcs.append(["choice", next(i for i, e in enumerate(exchanges) if e is s.exchange), s.choice_index])
            out.append(srcs)
        histories.append(out)
    with open(f"{name}_histories.json", "w") as f:
        json.dump(histories, f)
        f.write("\n")


write("art_exchanges", group)

# Edge cases of history building, checked but not trained.
# D: a tool call that used the whole token limit: ART does not continue its
# history with the next call.
limited = exchange(10, [USER], [choice(0, tool_call, [80, 81], -0.5, "tool_calls")], TOOLS)
limited.request["max_tokens"] = 2
d = Trajectory(
    exchanges=TrajectoryExchanges(
        chat_completions=[
            limited,
            exchange(11, turn2[1:], [choice(0, {"role": "assistant", "content": "Sunny."}, [82], -0.5)], TOOLS),
        ]
    ),
    reward=1.0,
)
# E: the tools changed between the calls: another history.
e = Trajectory(
    exchanges=TrajectoryExchanges(
        chat_completions=[
            exchange(12, [USER], [choice(0, tool_call, [80, 81], -0.5, "tool_calls")], TOOLS),
            exchange(13, turn2[1:], [choice(0, {"role": "assistant", "content": "Sunny."}, [82], -0.5)]),
        ]
    ),
)
write("art_exchanges_edges", TrajectoryGroup([d, e]))
