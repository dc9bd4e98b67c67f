"""Adapters to the frameworks agents are built with. Each imports only the facade (and the core
types it hands over), needs its own extra, and restates none of the facade's rules:

- :mod:`.otel`: every question as an OpenTelemetry trace, its model calls as GenAI spans with their
  tokens, USD and the budget (``memfrontier[otel]``).
"""
