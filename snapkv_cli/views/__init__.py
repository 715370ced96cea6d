"""Views of an :class:`~snapkv_cli.inspection.Inspection`: the terminal (Rich), a self-contained HTML page and a
PNG heatmap. Each module imports its heavy dependencies (matplotlib) only when it renders."""
