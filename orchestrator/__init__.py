"""octopoid: a task-queue orchestrator for AI coding agents, with per-task retry notes."""

from .model.exceptions import OctopoidError
from .model.tasks import Task, TaskState

__all__ = ["OctopoidError", "Task", "TaskState"]
__version__ = "0.1.0"
