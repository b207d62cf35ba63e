"""What luce-chat runs on: the engine and the optional parts the CLI's loader attached to it."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Runtime:
    """cli.load() makes one; the app, the plain REPL and `-p` take it (Runtime(engine) for a bare engine)."""

    engine: object                   # luce_engine.Engine
    draft: object | None = None      # luce_engine.DraftModel (--draft)
    speculator: object | None = None  # ChainSpeculator over engine and draft: replies speculate
    compressor: object | None = None  # luce_engine.pflash.AttachmentCompressor (--pflash-scorer)
    spec_note: str | None = None      # why the shipped draft is not used here (luce_engine.default_draft)

    @property
    def model(self):
        return self.engine.model
