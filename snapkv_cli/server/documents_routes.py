"""The documents API: upload a document, list them, delete one, ask a question of one.

``POST /api/documents`` takes the document as the raw body (its name in ``?name=``) or as the ``file`` field of a
multipart form; it is read with ``ask``'s readers and limits, the size limit enforced while the body comes in.
``POST /api/documents/{id}/ask`` with ``{"question": ...}`` (and, like the chat API, ``max_tokens``, ``temperature``,
``seed``, ``stop`` and ``snapkv: {"settings": {...}}``) streams server-sent events: ``progress`` (a step of the run),
``text`` (more of the answer), then ``report`` (``ask --json``'s object) or ``error``; with ``"stream": false`` it
answers ``{"answer", "report"}`` at once. With ``"inspect": true`` a ``views`` event (key) comes before the report:
where the answer's retained-token page (``GET /api/answers/{id}/view``, ``inspect --html``'s) and its
``inspect --json`` object (``GET /api/answers/{id}/inspect``) are.
"""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..answering.documents import MAX_DOCUMENT_MB_ENV
from ..errors import DocumentTooLarge, UserError
from .bodies import capped, read_json
from .context import ServerContext, context_of
from .documents import display_name, private_file
from .errors import ApiError
from .inspections import Inspections
from .request_options import decoding, requested_settings
from .sse import AnswerEvents, event, stream_job

COPY_CHUNK = 1 << 20
FORM_OVERHEAD = 64 * 1024  # a multipart form's headers and boundaries around the file
# the retained-token page is self-contained: its own inline script and styles, nothing fetched
VIEW_POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def _too_large(context: ServerContext, name: str, limit: int):
    """The refusal of an upload ``name`` over ``limit`` bytes, in the command line's words."""
    return lambda size: context.user_error(DocumentTooLarge(name, size, limit, MAX_DOCUMENT_MB_ENV))


async def upload(request: Request):
    context = context_of(request)
    limit = context.document_limit
    name = display_name(request.query_params.get("name"))
    too_large = _too_large(context, name, limit)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        return await _keep(context, name, capped(request, limit, too_large).stream())
    form = await capped(request, limit + FORM_OVERHEAD, too_large).form(max_files=1, max_fields=4)
    try:
        part = form.get("file")
        if not isinstance(part, UploadFile):
            raise ApiError(400, "the form has no file: send the document in its 'file' field", param="file")
        return await _keep(context, display_name(part.filename or name), _chunks(part))
    finally:
        await form.close()  # the form's own temporary file


async def _keep(context: ServerContext, name: str, chunks):
    """Write the upload's ``chunks`` to a private file, read it as a document and keep it."""
    store = context.store
    identifier, path = store.new_file(name)
    try:
        with private_file(path) as file:
            async for chunk in chunks:
                file.write(chunk)
        stored = await run_in_threadpool(store.add, identifier, name, path, context.runner.read)
    except UserError as error:
        path.unlink(missing_ok=True)
        api_error = context.user_error(error)
        api_error.message = api_error.message.replace(str(path), name)  # the client's name, not the server's
        raise api_error from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return JSONResponse(stored.to_json(), status_code=201)


async def listing(request: Request):
    return JSONResponse({"documents": context_of(request).store.listing()})


def _stored_or_404(request: Request):
    stored = context_of(request).store.get(request.path_params["id"])
    if stored is None:
        raise ApiError(404, f"no document {request.path_params['id']!r}: upload it, or list the documents",
                       code="document_not_found")
    return stored


async def delete(request: Request):
    stored = _stored_or_404(request)
    context_of(request).store.remove(stored.id)
    return Response(status_code=204)


async def ask(request: Request):
    context = context_of(request)
    stored = _stored_or_404(request)
    body = await read_json(request, context.json_limit)
    question = body.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ApiError(400, "a question is empty: every question needs some text", param="question")
    options = decoding(body)
    settings = requested_settings(context, body)
    inspect = body.get("inspect", False)
    if not isinstance(inspect, bool):
        raise ApiError(400, "inspect must be true or false", param="inspect")
    events = AnswerEvents(asyncio.get_running_loop())

    def work():
        answer = context.sessions.answer(stored.document, question.strip(), settings=settings, decoding=options)
        if not inspect:
            return answer, None
        from ..answering.inspection import inspect_answer

        inspection = inspect_answer(answer, context.runner.loaded.tokenizer, with_answer=True)
        return answer, Inspections.links(context.inspections.add(inspection))

    job = context.submit(work, events)
    if body.get("stream", True) is False:
        answer, views = await context.outcome(request, job)
        return JSONResponse({"answer": answer.report.answer, "report": answer.report.to_json(),
                             **({"views": views} if views else {})})
    await context.outcome(request, job, events.begun)

    def render(kind: str, value) -> str:
        return event({kind if kind == "text" else "message": value}, kind)

    def finish(result) -> list[str]:
        answer, views = result
        return [*([event(views, "views")] if views else []), event(answer.report.to_json(), "report")]

    def fail(error: Exception) -> list[str]:
        return [event(context.api_error(error).body(), "error")]

    return StreamingResponse(stream_job(job, events, render, finish, fail), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _inspection_or_404(request: Request):
    inspection = context_of(request).inspections.get(request.path_params["id"])
    if inspection is None:
        raise ApiError(404, f"no answer {request.path_params['id']!r} to inspect: ask with \"inspect\": true "
                            "(only the latest answers are kept)", code="answer_not_found")
    return inspection


async def view(request: Request):
    from ..views.html import render_chunks

    page = await run_in_threadpool(lambda: "".join(render_chunks(_inspection_or_404(request))))
    return HTMLResponse(page, headers={"Content-Security-Policy": VIEW_POLICY})


async def inspect_json(request: Request):
    return JSONResponse(await run_in_threadpool(_inspection_or_404(request).to_json))


async def _chunks(upload: UploadFile):
    while chunk := await upload.read(COPY_CHUNK):
        yield chunk


ROUTES = [Route("/api/documents", upload, methods=["POST"]),
          Route("/api/documents", listing, methods=["GET"]),
          Route("/api/documents/{id}", delete, methods=["DELETE"]),
          Route("/api/documents/{id}/ask", ask, methods=["POST"]),
          Route("/api/answers/{id}/view", view, methods=["GET"]),
          Route("/api/answers/{id}/inspect", inspect_json, methods=["GET"])]
