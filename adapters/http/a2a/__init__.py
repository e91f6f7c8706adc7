"""A2A over HTTP (design.md §5.2): the JSON-RPC endpoint on ``POST /`` and what it is made of.

``jsonrpc`` answers the methods and streams; ``accept`` records a message's work, ``parts``
reads its parts and ``message_files`` fetches, checks and saves its files; ``card`` is the
agent card; ``push`` the push-notification configs and the body a delivery sends;
``result_files`` a finished task's files; ``stream`` a task's events; ``wire`` the v1.0 shapes
and ``v03`` the 0.3 dialect. The package uses the HTTP wing's shared modules (errors, media,
bodies, SSE) and the services below; nothing in it is imported back by them.
"""
