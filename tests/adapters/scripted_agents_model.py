"""A scripted model for the Agents SDK's runner: it answers each call with the next scripted output (a
text reply or a function call) and records the input items it was given, so a test checks what the
session handed the model. The SDK ships no fake model; this is the `Model` interface it documents."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


def say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(
        id="msg_scripted", type="message", role="assistant", status="completed", content=content
    )


def call(call_id: str, name: str, **arguments: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}", type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments)
    )


class ScriptedModel(Model):
    def __init__(self, *outputs: ResponseOutputMessage | ResponseFunctionToolCall) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[dict[str, Any]]] = []
        self.instructions: list[str | None] = []

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.instructions.append(system_instructions)
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append([dict(item) for item in items])
        assert self.outputs, "the model was called more often than scripted"
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run the model without streaming")
