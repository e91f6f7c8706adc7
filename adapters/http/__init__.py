"""The HTTP wing: the falcon resources of every surface and what they share (ADR 0045).

``app`` builds the server's app from them: AgentCore (``agentcore``), ``/v1`` (``v1``,
``channel``, ``coordination``), the console's JSON (``console``), ``proofs``, ``metrics`` and
``/openapi.json``; A2A is the ``a2a`` package. They share the one error table (``errors``),
JSON media, request bodies (``inbound``), response shapes (``schemas``), SSE and following the
log. Above the runtime's services, below the programs that serve the app.
"""
