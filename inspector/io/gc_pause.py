"""`gc_paused` (moved to `inspector.core.gc_pause`, as `describe` pauses the collector too)."""

from inspector.core.gc_pause import gc_paused

__all__ = ["gc_paused"]
