"""The baseline for the HTTP benchmark: a Falcon app whose one GET does nothing."""

import falcon


class Trivial:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"ok": True}


app = falcon.App()
app.add_route("/trivial", Trivial())
