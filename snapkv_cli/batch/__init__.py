"""``snapkv batch``: the same questions of many documents, in one process or on a Ray cluster.

:mod:`.jobs` (what to ask), :mod:`.output` (the resumable JSONL file), :mod:`.driver` (skip, dispatch, write, count),
:mod:`.worker` (one loaded model answering a document's questions), :mod:`.local` and :mod:`.ray_executor` (where
the workers run), :mod:`.lines`, :mod:`.summary` and :mod:`.presenter` (what is written, counted and shown).
"""
