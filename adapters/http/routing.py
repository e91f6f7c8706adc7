"""What a route is, and how an app is built from a table of them (``adapters.http.routes``).

A ``Route`` says everything about one URI template in one place: the resource the server
makes for it (and the read-only console's, if that serves it too), who may call it, the
surface that writes its errors, whether the shared-volume gate holds the lease before it, and
how ``/openapi.json`` describes it (or why it does not). The apps mount the table; the
middlewares look the matched template up in it (``req.uri_template``), never at the path or
at the resource's class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import falcon

from adapters.http.auth import Access
from adapters.http.errors import Surface
from adapters.http.openapi_parts import Operation
from adapters.http.ports import ReadRuntime, ServerRuntime

Make = Callable[[ServerRuntime], object]
# The read-only console's runtime (``adapters.programs.console_server.ReadOnlyRuntime``) gives
# its read resources the port they read through.
MakeReadOnly = Callable[[ReadRuntime], object]


@dataclass(frozen=True)
class Unlisted:
    """A route ``/openapi.json`` leaves out on purpose, and why."""

    reason: str


@dataclass(frozen=True)
class Route:
    """One URI template: its resource, access, error surface and OpenAPI operations.

    ``read_only`` makes the read-only console's resource (every caller there is the
    operator, on loopback); None, the console does not serve the route. ``holds_lease``
    False: in shared-volume mode the gate answers it without the lease (ADRs 0035, 0042).
    """

    path: str
    resource: Make
    access: Access
    errors: Surface
    openapi: Operation | tuple[Operation, ...] | Unlisted
    read_only: MakeReadOnly | None = None
    holds_lease: bool = True

    @property
    def operations(self) -> tuple[Operation, ...]:
        """What ``/openapi.json`` lists of this route (none for an ``Unlisted`` one)."""
        if isinstance(self.openapi, Operation):
            return (self.openapi,)
        return () if isinstance(self.openapi, Unlisted) else self.openapi


class Routes(Mapping[str, Route]):
    """A route table, by URI template, in the order it was written.

    Raises:
        ValueError: two routes with one template, or an ``Unlisted`` route without a reason.
    """

    def __init__(self, routes: Iterable[Route]) -> None:
        self._routes: dict[str, Route] = {}
        for route in routes:
            if route.path in self._routes:
                raise ValueError(f"route {route.path} is in the table twice")
            if isinstance(route.openapi, Unlisted) and not route.openapi.reason.strip():
                raise ValueError(f"route {route.path}: say why /openapi.json leaves it out")
            self._routes[route.path] = route

    def __getitem__(self, path: str) -> Route:
        return self._routes[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._routes)

    def __len__(self) -> int:
        return len(self._routes)

    def access(self) -> dict[str, Access]:
        return {path: route.access for path, route in self.items()}

    def surfaces(self) -> dict[str, Surface]:
        return {path: route.errors for path, route in self.items()}

    def read_only(self) -> Routes:
        """The routes the read-only console serves."""
        return Routes(route for route in self.values() if route.read_only is not None)

    def mount(
        self, app: falcon.App[falcon.Request, falcon.Response], runtime: ServerRuntime
    ) -> None:
        """Every route on the server's ``app``, each with a resource of its own."""
        for route in self.values():
            app.add_route(route.path, route.resource(runtime))

    def mount_read_only(
        self, app: falcon.App[falcon.Request, falcon.Response], runtime: ReadRuntime
    ) -> None:
        """The read-only console's routes on its ``app``, with their read-only resources."""
        for route in self.values():
            if route.read_only is not None:
                app.add_route(route.path, route.read_only(runtime))
