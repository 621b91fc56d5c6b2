"""What agents learn beyond one task: working notes (QQ-style) and searchable memory."""
