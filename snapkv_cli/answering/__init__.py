"""The answer path, in the order the data takes it: a document is read (:mod:`.documents`), becomes a prompt with
the question last (:mod:`.prompting`), is answered by a :class:`~.session.DocumentSession` (prefix, compressed
prefill, decoding) into an :class:`~.report.Answer` with its :class:`~.report.Report`, and what was kept can be
inspected (:mod:`.inspection`). A :class:`~.runner.Runner` loads the model once and drives sessions, telling a
:class:`~.presenter.Presenter` what happens; every command, the batch and the benchmarks take this path."""
