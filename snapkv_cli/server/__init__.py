"""``snapkv serve``: the loaded model behind HTTP, for a browser, an editor, a notebook or any OpenAI client.

The server is one more presenter on the :class:`~snapkv_cli.answering.runner.Runner`: the model loads once, one worker
thread answers the requests one at a time (:mod:`.worker`), each question asked in the session that holds its
document's prefilled prefix (:mod:`.sessions`). The routes: the documents API (:mod:`.documents_routes`, uploads kept
by :mod:`.documents`), the OpenAI-compatible API (:mod:`.openai_routes`), answers streamed as server-sent events
(:mod:`.sse`), health, status and the web page (:mod:`.app`); request bodies are capped (:mod:`.bodies`), what a
request asks of its answer is read once for both APIs (:mod:`.request_options`), errors take OpenAI's shape
(:mod:`.errors`), and :mod:`.security` decides who may talk to it. :mod:`.listen` runs it on uvicorn.
"""
