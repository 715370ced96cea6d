"""The retained-token views of recent answers: what the compressed cache kept of each prompt token.

A question asked with ``"inspect": true`` has its :class:`~snapkv_cli.answering.inspection.Inspection` taken on the
worker right after its answer (the cache is then dropped with the answer; only the inspection stays); the latest
``capacity`` are held, by id, for ``GET /api/answers/{id}/view`` (``snapkv inspect --html``'s page) and
``/api/answers/{id}/inspect`` (``snapkv inspect --json``'s object).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict

from ..answering.inspection import Inspection


class Inspections:
    """The latest ``capacity`` inspections, the oldest dropped first."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self.held: OrderedDict[str, Inspection] = OrderedDict()

    def add(self, inspection: Inspection) -> str:
        identifier = secrets.token_hex(8)
        self.held[identifier] = inspection
        while len(self.held) > self.capacity:
            self.held.popitem(last=False)
        return identifier

    def get(self, identifier: str) -> Inspection | None:
        return self.held.get(identifier)

    @staticmethod
    def links(identifier: str) -> dict:
        """Where an answer's views are."""
        return {"id": identifier, "view": f"/api/answers/{identifier}/view",
                "inspect": f"/api/answers/{identifier}/inspect"}
