"""PostgreSQL below the queue and the memory: ``database`` (this process's connections,
transactions, advisory locks) and ``schema`` (the ``octopoid`` schema's migrations and the
one shared connection pool per database). Imported only by those who use PostgreSQL."""
