"""Everything the tool draws: the report panel (:mod:`.report_panel`) and the progress display
(:mod:`.progress_display`) on stderr, and the views of an :class:`~snapkv_cli.answering.inspection.Inspection`: the
terminal (Rich), a self-contained HTML page and a PNG heatmap. Each module imports its heavy dependencies (matplotlib)
only when it renders."""
