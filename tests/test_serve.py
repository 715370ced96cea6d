"""``snapkv serve`` over real HTTP: the server runs in this process on 127.0.0.1 and a free port (uvicorn on a thread)
with the tiny model, and is talked to with httpx and the official ``openai`` client; every test stops its server."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from typer.testing import CliRunner

from snapkv_cli.cli import app
from snapkv_cli.cli.options import RUN_OPTIONS, check_run_values
from snapkv_cli.cli.serve import build, setting_names, settings_for
from snapkv_cli.errors import UserError
from snapkv_cli.server.security import is_loopback

openai = pytest.importorskip("openai")

NOTES = ("Harbor notes.\n\nThe vault code is 4512. Alice Moreau wrote it on the blue card in March.\n\n"
         "The ferry leaves at 7 in the morning; the lighthouse keeper is Duncan Hale.\n")
QUESTION = "What is the vault code?"
KEY = "s3cret-key"


def choices(model: str, **values):
    given = {option.name: option.default for option in RUN_OPTIONS}
    given.update({"model": model, "max_new_tokens": 16, **values})
    return check_run_values(given)


@contextmanager
def served(model: str, *, api_key: str | None = None, queue: int = 8, keep_mb: float = 2048,
           time_limit_s: float | None = None, **values):
    """A server on a free loopback port: yields its URL and its context; stopped at the end."""
    listener = build(choices(model, **values), port=0, api_key=api_key, queue=queue, keep_mb=keep_mb,
                     time_limit_s=time_limit_s)
    url = listener.start()
    try:
        yield url, listener.server.config.app.app.state.context
    finally:
        listener.stop()


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with served(tiny_model_path) as running:
        yield running


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server[0], timeout=120) as client:
        yield client


def ask_json(model: str, document, question: str, *options: str) -> dict:
    result = CliRunner().invoke(app, ["ask", str(document), question, "--model", model, "--max-new-tokens", "16",
                                      "--json", "--quiet", *options])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def error_of(response: httpx.Response) -> dict:
    """The error of a refused request, checked to be in OpenAI's shape."""
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


COMPARED = ("answer", "generated_tokens", "prompt_tokens", "prompt", "cache", "layers", "settings", "method", "stop")


# ------------------------------------------------------------------------------------------ the OpenAI API


def test_chat_completions_answer_as_ask_does_streamed_and_not(server, tiny_model_path, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    expected = ask_json(tiny_model_path, notes, QUESTION)
    client = openai.OpenAI(base_url=server[0] + "v1", api_key="unused")
    messages = [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}]

    completion = client.chat.completions.create(model="snapkv", messages=messages)
    report = completion.model_extra["snapkv"]["report"]
    assert completion.choices[0].message.content == expected["answer"] and expected["answer"]
    assert completion.usage.completion_tokens == expected["generated_tokens"]
    assert completion.usage.prompt_tokens == expected["prompt_tokens"]
    assert completion.choices[0].finish_reason == ("length" if expected["stop"]["reason"] == "max_new_tokens"
                                                   else "stop")
    assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}

    chunks = list(client.chat.completions.create(model="snapkv", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    texts = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert "".join(texts) == expected["answer"]
    assert 1 < len(texts) <= expected["generated_tokens"]  # streamed as it is generated, a token or more at a time
    finish = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert len(finish) == 1
    streamed = finish[0].model_extra["snapkv"]["report"]
    assert {key: streamed[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}
    assert streamed["prefix"]["source"] == "memory"  # the same document again: its prefill is paid once
    assert chunks[-1].usage.completion_tokens == expected["generated_tokens"]


def test_chat_settings_and_decoding_options_are_honoured(server, tiny_model_path, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    expected = ask_json(tiny_model_path, notes, QUESTION, "--method", "streamingllm", "--budget", "40",
                        "--max-new-tokens", "6")
    client = openai.OpenAI(base_url=server[0] + "v1", api_key="unused")
    messages = [{"role": "user", "content": NOTES}, {"role": "user", "content": QUESTION}]
    completion = client.chat.completions.create(
        model="snapkv", messages=messages, max_tokens=6,
        extra_body={"snapkv": {"settings": {"method": "streamingllm", "budget": 40}}})
    report = completion.model_extra["snapkv"]["report"]
    assert report["method"] == "streamingllm"
    assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}
    answer = completion.choices[0].message.content
    stop = answer[len(answer) // 2:][:2]
    cut = client.chat.completions.create(model="snapkv", messages=messages, max_tokens=6, stop=[stop],
                                         extra_body={"snapkv": {"settings": {"method": "streamingllm",
                                                                             "budget": 40}}})
    assert cut.choices[0].message.content == answer[:answer.index(stop)].strip()
    assert cut.model_extra["snapkv"]["report"]["stop"]["stop_string"] == stop


def test_a_conversation_prefills_only_what_each_turn_adds_and_answers_as_ask(server, tiny_model_path, tmp_path):
    """A chat client resends the whole conversation each turn: the turns before the question are the document, each
    after its role, and each turn's prefix is built on the one before it (only what the turn adds is prefilled);
    every answer is ``ask``'s on that document."""
    client = openai.OpenAI(base_url=server[0] + "v1", api_key="unused")
    messages = [{"role": "system", "content": NOTES}]
    questions = [QUESTION, "Who is the lighthouse keeper?", "When does the ferry leave?"]
    earlier_prefix = 0
    for turn, question in enumerate(questions):
        document = "\n\n".join([NOTES, *(f"{message['role'].capitalize()}: {message['content']}"
                                         for message in messages[1:])]).strip()
        path = tmp_path / f"turn{turn}.txt"
        path.write_text(document, encoding="utf-8")
        expected = ask_json(tiny_model_path, path, question)
        messages.append({"role": "user", "content": question})
        completion = client.chat.completions.create(model="snapkv", messages=messages)
        report = completion.model_extra["snapkv"]["report"]
        assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}, turn
        prefix = report["prefix"]
        if turn:
            assert prefix["source"] == "prefill"
            assert earlier_prefix // 2 < prefix["extended_tokens"] < earlier_prefix < prefix["tokens"], prefix
        earlier_prefix = prefix["tokens"]
        messages.append({"role": "assistant", "content": completion.choices[0].message.content})


def test_models_lists_the_loaded_model(server):
    models = openai.OpenAI(base_url=server[0] + "v1", api_key="unused").models.list()
    assert [model.id for model in models.data] == [server[1].runner.loaded.name]


def test_bad_chat_requests_get_openai_errors_in_the_command_lines_words(http):
    malformed = http.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type":
                                                                                     "application/json"})
    assert malformed.status_code == 400 and "not valid JSON" in error_of(malformed)["message"]
    no_document = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi?"}]})
    assert no_document.status_code == 400 and error_of(no_document)["param"] == "messages"
    unknown = http.post("/v1/chat/completions", json={
        "messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}],
        "snapkv": {"settings": {"methd": "snapkv"}}})
    assert unknown.status_code == 400 and "unknown compression setting 'methd'" in error_of(unknown)["message"]
    window = http.post("/v1/chat/completions", json={
        "messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}],
        "snapkv": {"settings": {"budget": 0.01}}})
    assert window.status_code == 400 and "(--budget, --window)" in error_of(window)["message"]


# ------------------------------------------------------------------------------------------ the documents API


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    events = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            name = next((line[7:] for line in lines if line.startswith("event: ")), "message")
            events.append((name, json.loads("".join(line[6:] for line in lines if line.startswith("data: ")))))
    return events


def test_upload_ask_twice_list_and_delete(http, server, tiny_model_path, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES, encoding="utf-8")
    expected = ask_json(tiny_model_path, notes, QUESTION)
    uploaded = http.post("/api/documents", files={"file": ("notes.md", NOTES.encode(), "text/markdown")})
    assert uploaded.status_code == 201, uploaded.text
    stored = uploaded.json()
    assert stored["name"] == "notes.md" and stored["kind"] == "markdown" and stored["bytes"] == len(NOTES.encode())
    assert stored["id"] in [document["id"] for document in http.get("/api/documents").json()["documents"]]

    first = http.post(f"/api/documents/{stored['id']}/ask", json={"question": QUESTION})
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
    events = sse_events(first)
    assert "".join(data["text"] for name, data in events if name == "text") == expected["answer"]
    assert [name for name, _ in events][-1] == "report"
    report = events[-1][1]
    assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}
    assert report["document"] == "notes.md"
    second = http.post(f"/api/documents/{stored['id']}/ask", json={"question": "Who keeps the lighthouse?",
                                                                  "stream": False}).json()
    assert second["report"]["prefix"]["source"] == "memory" and second["report"]["question_index"] == 1

    files = list(server[1].store.directory.iterdir())
    assert [path.name for path in files] == [stored["id"] + ".md"]
    assert (server[1].store.directory.stat().st_mode & 0o777) == 0o700
    assert http.delete(f"/api/documents/{stored['id']}").status_code == 204
    assert not files[0].exists()
    gone = http.post(f"/api/documents/{stored['id']}/ask", json={"question": QUESTION})
    assert gone.status_code == 404 and error_of(gone)["code"] == "document_not_found"


def test_an_answers_retained_token_view_and_inspect_json_are_inspects(http, tiny_model_path, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    result = CliRunner().invoke(app, ["inspect", str(notes), QUESTION, "--model", tiny_model_path, "--answer",
                                      "--max-new-tokens", "16", "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    expected = json.loads(result.stdout)
    stored = http.post("/api/documents?name=notes.txt", content=NOTES.encode()).json()
    asked = http.post(f"/api/documents/{stored['id']}/ask", json={"question": QUESTION, "inspect": True})
    events = sse_events(asked)
    assert [name for name, _ in events][-2:] == ["views", "report"]
    views = events[-2][1]
    inspected = http.get(views["inspect"]).json()
    for key in ("tokens", "layers", "answer", "window"):
        assert inspected[key] == expected[key], key
    page = http.get(views["view"])
    assert page.status_code == 200 and "snapkv inspect" in page.text and QUESTION in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    missing = http.get("/api/answers/0123/view")
    assert missing.status_code == 404 and error_of(missing)["code"] == "answer_not_found"
    http.delete(f"/api/documents/{stored['id']}")


@pytest.mark.parametrize("cache_docs", [False, True])
def test_prefixes_beyond_the_memory_cap_are_dropped_and_come_back_from_the_document_cache(tiny_model_path,
                                                                                       doc_cache_dir, cache_docs):
    other = NOTES.replace("4512", "7730")
    with served(tiny_model_path, keep_mb=0.001, cache_docs=cache_docs) as (url, context), \
            httpx.Client(base_url=url, timeout=60) as http:
        def ask(text: str) -> dict:
            return http.post("/v1/chat/completions", json={"messages": [
                {"role": "system", "content": text}, {"role": "user", "content": QUESTION}]}).json()["snapkv"]["report"]

        assert ask(NOTES)["prefix"]["source"] == "prefill"
        assert ask(NOTES)["prefix"]["source"] == "memory"  # the one answering now is kept, whatever the cap
        assert ask(other)["prefix"]["source"] == "prefill"
        status = context.sessions.status()
        assert status["held"] == 1 and status["bytes"] > status["capacity_bytes"]
        assert ask(NOTES)["prefix"]["source"] == ("disk" if cache_docs else "prefill")


def test_a_raw_upload_a_pdf_and_bad_documents(http, server):
    from pathlib import Path

    pdf = (Path(__file__).resolve().parent.parent / "examples" / "annual_report.pdf").read_bytes()
    raw = http.post("/api/documents?name=../../annual_report.pdf", content=pdf)
    assert raw.status_code == 201 and raw.json()["kind"] == "pdf" and raw.json()["name"] == "annual_report.pdf"
    empty = http.post("/api/documents?name=empty.txt", content=b"")
    assert empty.status_code == 400 and "'empty.txt' has no text" in error_of(empty)["message"]
    binary = http.post("/api/documents?name=notes.txt", content=bytes(range(256)) * 8)
    message = error_of(binary)["message"]
    assert binary.status_code == 415 and message.startswith("'notes.txt' is not a text document")
    assert str(server[1].store.directory) not in message
    assert [path.name for path in server[1].store.directory.iterdir()] == [raw.json()["id"] + ".pdf"]
    http.delete(f"/api/documents/{raw.json()['id']}")


def test_an_oversized_upload_is_refused_before_it_is_read_whole(tiny_model_path):
    with served(tiny_model_path, max_document_mb=0.01) as (url, context), httpx.Client(base_url=url) as http:
        declared = http.post("/api/documents?name=big.txt", content=b"x" * 20_000)
        assert declared.status_code == 413
        assert error_of(declared)["message"].startswith("'big.txt' is 19.5 KB, over the 10.2 KB limit for documents; "
                                                        "raise --max-document-mb")
        sent = []

        def chunks():  # no Content-Length: 64 MB streamed, far more than the socket buffers hold
            for index in range(1024):
                sent.append(index)
                yield b"y" * 65536

        try:
            streamed = http.post("/api/documents?name=big.txt", content=chunks())
            assert streamed.status_code == 413
        except httpx.TransportError:  # the server may close the connection while the client still sends
            pass
        assert len(sent) < 1024
        assert list(context.store.directory.iterdir()) == []


# ------------------------------------------------------------------------------------------ one model, many clients


def wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def until_text(response: httpx.Response):
    """Read a streamed chat completion until the first chunk of the answer's text; returns the lines' iterator, to be
    held while the stream should stay open (dropping it closes the connection)."""
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
            return lines
    raise AssertionError("the stream ended before any text")


LONG = {"max_new_tokens": 3000, "stop_on_repeat": False}


@pytest.fixture
def endless(monkeypatch):
    """Answers that end only at their token limit: no end-of-sequence token (with ``LONG``, minutes of decoding)."""
    from snapkv_cli.generation import generate

    monkeypatch.setattr(generate, "stop_token_ids", lambda model, tokenizer: set())


def test_a_client_that_leaves_stops_its_generation_and_the_next_is_served(tiny_model_path, endless):
    with served(tiny_model_path, **LONG) as (url, context), httpx.Client(base_url=url, timeout=60) as http:
        body = {"messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}],
                "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = until_text(response)
            assert context.worker.running is not None
            lines.close()  # the client leaves
        left = time.monotonic()
        wait_for(lambda: context.worker.running is None, 10)
        assert time.monotonic() - left < 5  # the 3000-token answer stopped at its next token
        assert context.worker.status()["stopped"] == 1
        answer = http.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 3})
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] <= 3


def test_a_request_past_its_time_limit_is_stopped_with_a_timeout(tiny_model_path, endless):
    with served(tiny_model_path, time_limit_s=1.0, **LONG) as (url, context), httpx.Client(base_url=url,
                                                                                           timeout=60) as http:
        body = {"messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}]}
        started = time.monotonic()
        late = http.post("/v1/chat/completions", json=body)
        assert late.status_code == 408 and error_of(late)["message"] == "the request ran past its 1 s limit"
        assert time.monotonic() - started < 10 and context.worker.status()["stopped"] == 1
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as streamed:
            events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: {")]
        assert events[-1]["error"]["code"] == "timeout"  # after the answer's first chunks, the error's


def test_past_the_queues_bound_requests_are_refused_with_retry_after_and_none_accepted_is_lost(tiny_model_path,
                                                                                             endless):
    with served(tiny_model_path, queue=1, **LONG) as (url, context), httpx.Client(base_url=url, timeout=60) as http:
        body = {"messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}]}
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as long_one:
            held = until_text(long_one)
            waiting: list[httpx.Response] = []
            thread = threading.Thread(target=lambda: waiting.append(
                http.post("/v1/chat/completions", json={**body, "max_tokens": 3})))
            thread.start()
            wait_for(lambda: context.worker.status()["waiting"] == 1)
            refused = http.post("/v1/chat/completions", json={**body, "max_tokens": 3})
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
            assert error_of(refused)["code"] == "rate_limit_exceeded"
            assert http.get("/api/status").json()["queue"] == {"waiting": 1, "capacity": 1, "running": True,
                                                               "served": 0, "stopped": 0}
            held.close()  # the long one's client leaves: the one waiting runs
        thread.join(60)
        assert waiting[0].status_code == 200 and waiting[0].json()["usage"]["completion_tokens"] <= 3


# ------------------------------------------------------------------------------------------ options


def test_a_request_names_a_setting_by_its_parameter_or_its_flag_with_dashes_or_underscores():
    names = setting_names()
    assert names["budget"] == names["max_capacity_prompt"] == names["max-capacity-prompt"] == "max_capacity_prompt"
    assert names["window"] == names["window_size"] == names["window-size"] == "window_size"
    assert names["gqa"] == names["gqa_aggregation"] == names["gqa-aggregation"] == "gqa_aggregation"
    assert names["method"] == "method"
    assert not any(name.startswith("-") for name in names)


def test_a_requests_settings_are_parsed_as_the_command_line_parses_them_over_the_servers_own(tiny_model_path):
    parse = settings_for(choices(tiny_model_path, window_size=8, max_capacity_prompt=64).values)
    assert (parse({}).window_size, parse({}).max_capacity_prompt) == (8, 64)
    settings = parse({"budget": 40, "method": "streamingllm", "window": 16})
    assert (settings.method, settings.max_capacity_prompt, settings.window_size) == ("streamingllm", 40, 16)
    assert parse({"max-capacity-prompt": "48"}).max_capacity_prompt == 48
    with pytest.raises(UserError) as unknown:
        parse({"methd": "snapkv"})
    message = str(unknown.value)
    assert message.startswith("unknown compression setting 'methd': give one of budget, gqa, gqa_aggregation, ")
    assert message.endswith(", window, window_size") and "window-size" not in message


def test_the_server_gets_the_commands_limits_and_says_where_it_listens_once_it_does(tiny_model_path):
    started = []
    listener = build(choices(tiny_model_path), port=0, queue=3, keep_mb=1.5, time_limit_s=9.0,
                     on_started=started.append)
    context = listener.server.config.app.app.state.context
    assert (context.queue, context.keep_bytes, context.time_limit_s) == (3, int(1.5 * 2**20), 9.0)
    assert context.settings_for({"budget": 40}).max_capacity_prompt == 40
    assert listener.server.config.port == 0 and started == []  # nothing listens before start
    url = listener.start()
    try:
        assert started == [url] and url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
    finally:
        listener.stop()
    defaults = build(choices(tiny_model_path), port=0).server.config.app.app.state.context
    assert (defaults.queue, defaults.keep_bytes, defaults.time_limit_s) == (8, 2048 * 2**20, None)


# ------------------------------------------------------------------------------------------ security


def test_the_api_key_is_needed_on_every_endpoint(tiny_model_path):
    with served(tiny_model_path, api_key=KEY) as (url, _), httpx.Client(base_url=url) as http:
        for method, path in (("GET", "/"), ("GET", "/health"), ("GET", "/api/status"), ("GET", "/api/documents"),
                             ("POST", "/api/documents"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
            missing = http.request(method, path)
            assert missing.status_code == 401 and error_of(missing)["code"] == "invalid_api_key", path
            wrong = http.request(method, path, headers={"Authorization": "Bearer " + KEY + "x"})
            assert wrong.status_code == 401 and "wrong" in error_of(wrong)["message"], path
        assert "www-authenticate" in http.get("/").headers  # a browser asks for the key
        assert http.get("/health", headers={"Authorization": f"Bearer {KEY}"}).json() == {"status": "ok"}
        assert http.get("/health", auth=("anyone", KEY)).status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "v1", api_key="wrong").models.list()
        assert openai.OpenAI(base_url=url + "v1", api_key=KEY).models.list().data


def test_a_non_loopback_host_needs_an_api_key(tiny_model_path):
    for key in (None, ""):  # an empty key is no key
        with pytest.raises(UserError, match="set an API key"):
            build(choices(tiny_model_path), host="0.0.0.0", port=0, api_key=key)
    keyed = build(choices(tiny_model_path), host="0.0.0.0", port=0, api_key=KEY)  # built, never started
    assert keyed.server.config.host == "0.0.0.0" and keyed.thread is None
    result = CliRunner().invoke(app, ["serve", "--host", "192.168.1.10", "--model", tiny_model_path])
    assert result.exit_code == 1 and result.stderr.startswith("Error: listening on 192.168.1.10 lets other machines")
    assert "Loading" not in result.stderr  # refused before the model loads


def test_other_sites_pages_and_names_are_turned_away(http):
    assert http.get("/health", headers={"Host": "attacker.example"}).status_code == 403  # DNS rebinding
    foreign = http.post("/api/documents?name=a.txt", content=b"text", headers={"Origin": "https://attacker.example"})
    assert foreign.status_code == 403
    assert "access-control-allow-origin" not in http.options("/v1/models", headers={
        "Origin": "https://attacker.example", "Access-Control-Request-Method": "POST"}).headers


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.com", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_the_page_is_served_from_the_package_without_the_network(http):
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'name="viewport"' in page.text and "/api/documents" in page.text
    assert "http://" not in page.text and "https://" not in page.text


# ------------------------------------------------------------------------------------------ a killed server


def start_process(model: str, cache_dir, *options: str):
    """``snapkv serve --json`` in its own process on a free port: (process, URL), once its line on stdout says it
    listens (the same as its line on stderr)."""
    import os
    import subprocess
    import sys

    environment = {**os.environ, "SNAPKV_DOC_CACHE_DIR": str(cache_dir)}
    process = subprocess.Popen([sys.executable, "-m", "snapkv_cli", "serve", "--model", model, "--port", "0",
                                "--cache-docs", "--json", *options], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=environment)
    line = process.stdout.readline()
    if not line:
        raise AssertionError(f"the server did not start (exit {process.wait()}): {process.stderr.read()}")
    listening = json.loads(line)
    assert listening == {"url": listening["url"], "openai_base_url": listening["url"] + "v1",
                         "api_key_required": False}
    assert listening["url"].startswith("http://127.0.0.1:") and listening["url"].endswith("/")
    return process, listening["url"]


def test_killed_mid_answer_and_restarted_the_document_cache_still_serves_the_prefix(tiny_model_path, tmp_path):
    import signal

    body = {"messages": [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}]}
    process, url = start_process(tiny_model_path, tmp_path / "cache", "--max-new-tokens", "3000",
                                 "--no-stop-on-repeat")
    try:
        with httpx.Client(base_url=url, timeout=60) as http, \
                http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            held = until_text(response)  # answering: the document's prefill is stored
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            held.close()
    finally:
        process.kill()
        process.wait()
    process, url = start_process(tiny_model_path, tmp_path / "cache", "--max-new-tokens", "3")
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            report = http.post("/v1/chat/completions", json=body).json()["snapkv"]["report"]
    finally:
        process.terminate()
        process.wait(30)
    assert report["doc_cache"]["status"] == "hit" and report["prefix"]["source"] == "disk"


# ------------------------------------------------------------------------------------------ the default model


@pytest.mark.slow
def test_the_default_model_answers_through_the_openai_client_as_ask_does(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    result = CliRunner().invoke(app, ["ask", str(notes), QUESTION, "--max-new-tokens", "24", "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    expected = json.loads(result.stdout)
    with served(None, max_new_tokens=24) as (url, _):
        client = openai.OpenAI(base_url=url + "v1", api_key="unused")
        messages = [{"role": "system", "content": NOTES}, {"role": "user", "content": QUESTION}]
        completion = client.chat.completions.create(model="snapkv", messages=messages)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="snapkv", messages=messages, stream=True) if chunk.choices)
    report = completion.model_extra["snapkv"]["report"]
    assert {key: report[key] for key in COMPARED} == {key: expected[key] for key in COMPARED}
    assert completion.choices[0].message.content == streamed == expected["answer"]
    assert "4512" in expected["answer"]
