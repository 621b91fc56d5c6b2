"""Where queue state lives. ``FolderStore`` is the embedded default."""

from .base import QueueStore
from .files import FolderStore

__all__ = ["FolderStore", "QueueStore"]
