"""Adapters to the frameworks agents are built with. Each imports only the facade (and the core
types it hands over), needs its own extra, and restates none of the facade's rules:

- :mod:`.otel`: every question as an OpenTelemetry trace, its model calls as GenAI spans with their
  tokens, USD and the budget (``memfrontier[otel]``).
- :mod:`.langgraph`: a LangGraph ``BaseStore`` whose namespaces are scopes (``memfrontier[langgraph]``).
- :mod:`.agents`: an OpenAI Agents SDK ``Session`` and a ``recall`` tool that answers within a
  budget (``memfrontier[agents]``).
- :mod:`.llamaindex`: a LlamaIndex memory block that reads what a strategy recalls within its token
  share (``memfrontier[llamaindex]``).
"""
