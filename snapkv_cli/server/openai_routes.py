"""The OpenAI-compatible API: ``GET /v1/models`` and ``POST /v1/chat/completions``, streamed and not.

A chat's last message is the question (so it falls in the observation window, as ``ask``'s question does); the
messages before it are the document, read as ``ask`` reads one piped in: the first one's text, then the turns of
the conversation so far, each after its role (``User:``, ``Assistant:``), joined by blank lines. The session is
found by the prompt prefix's tokens, so a client that resends the same document with each question (as chat
clients do) pays its prefill once, and the next turn of a conversation prefills only what it adds.

``max_tokens``, ``temperature``, ``seed`` and ``stop`` are honoured; compression settings may come in the extension
field ``snapkv: {"settings": {...}}`` (the names of ``ask``'s options: ``method``, ``budget``, ``window_size``...),
and the answer's report (``ask --json``'s object) comes back in ``snapkv: {"report": ...}`` (the last chunk's, when
streamed).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from .bodies import read_json
from .context import context_of
from .errors import ApiError
from .request_options import EXTENSION, decoding, requested_settings
from .sse import AnswerEvents, event, stream_job


def _content(message: dict, index: int) -> str:
    """The text of a message: a string, or the text parts of a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts",
                   param=f"messages[{index}].content")


def _role(message: dict) -> str:
    """How a turn of the conversation is labelled in the document: its role, capitalized (``User``)."""
    return str(message.get("role") or "user").capitalize()


def question_and_document(body: dict) -> tuple[str, str]:
    """The last message (a user's) as the question, the texts of the messages before it as the document."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages must be a non-empty list of messages", param="messages")
    if messages[-1].get("role") != "user":
        raise ApiError(400, "the last message must be the user's question", param="messages")
    question = _content(messages[-1], len(messages) - 1).strip()
    if not question:
        raise ApiError(400, "the question (the last message) is empty: it needs some text", param="messages")
    texts = [_content(message, index) if index == 0 else f"{_role(message)}: {_content(message, index)}"
             for index, message in enumerate(messages[:-1])]
    document = "\n\n".join(texts).strip()
    if not document:
        raise ApiError(400, "no document: send it in a message (system or user) before the question",
                       param="messages")
    return question, document


def finish_reason(report: dict) -> str:
    return "length" if report["stop"]["reason"] == "max_new_tokens" else "stop"


def usage(report: dict) -> dict:
    return {"prompt_tokens": report["prompt_tokens"], "completion_tokens": report["generated_tokens"],
            "total_tokens": report["prompt_tokens"] + report["generated_tokens"]}


@dataclass(frozen=True)
class Completion:
    """One chat completion's identity, the same in its every chunk: its id, when it was created, the model's name."""

    id: str
    created: int
    model: str

    @classmethod
    def new(cls, model: str) -> Completion:
        return cls(f"chatcmpl-{secrets.token_hex(12)}", int(time.time()), model)

    def head(self, kind: str) -> dict:
        """The fields every object of the completion starts with; ``kind``: its ``object``."""
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def chunk(self, delta: dict, reason: str | None = None, **extra) -> str:
        """One streamed chunk's event."""
        return event({**self.head("chat.completion.chunk"),
                      "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}], **extra})


async def models(request: Request):
    context = context_of(request)
    return JSONResponse({"object": "list", "data": [
        {"id": context.runner.loaded.name, "object": "model", "created": 0, "owned_by": "snapkv"}]})


async def chat_completions(request: Request):
    context = context_of(request)
    body = await read_json(request, context.json_limit)
    question, text = question_and_document(body)
    options = decoding(body)
    settings = requested_settings(context, body)
    document = await run_in_threadpool(context.read_text, text, "<chat>")
    events = AnswerEvents(asyncio.get_running_loop())
    job = context.submit(lambda: context.sessions.answer(document, question, settings=settings, decoding=options),
                         events)
    completion = Completion.new(context.runner.loaded.name)
    if not body.get("stream"):
        answer = await context.outcome(request, job)
        report = answer.report.to_json()
        return JSONResponse({
            **completion.head("chat.completion"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": report["answer"]},
                         "finish_reason": finish_reason(report), "logprobs": None}],
            "usage": usage(report), EXTENSION: {"report": report}})
    # the response starts with the first event: a request that fails before it gets its HTTP status
    await context.outcome(request, job, events.begun)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def render(kind: str, value) -> str | None:
        return completion.chunk({"content": value}) if kind == "text" else None

    def finish(answer) -> list[str]:
        report = answer.report.to_json()
        sent = [completion.chunk({}, finish_reason(report), **{EXTENSION: {"report": report}})]
        if include_usage:
            sent.append(event({**completion.head("chat.completion.chunk"), "choices": [], "usage": usage(report)}))
        return [*sent, event("[DONE]")]

    def fail(error: Exception) -> list[str]:
        return [event(context.api_error(error).body()), event("[DONE]")]

    async def body_events():
        yield completion.chunk({"role": "assistant", "content": ""})
        async for sent in stream_job(job, events, render, finish, fail):
            yield sent

    return StreamingResponse(body_events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


ROUTES = [Route("/v1/models", models, methods=["GET"]),
          Route("/v1/chat/completions", chat_completions, methods=["POST"])]
