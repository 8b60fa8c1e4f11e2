"""The key of a minute row that is not a shard: ``*``, the whole run.

Minute tables (sealed and live), the API's ``shard_id`` parameter and the pages use it.
No shard can take the name: ingest rejects a span whose shard id is ``*``
(docs/ingest.md#limits).
"""

from __future__ import annotations

from typing import Final

WHOLE_RUN: Final = "*"
