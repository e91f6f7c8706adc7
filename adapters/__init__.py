"""Entry points at the edge: the command line now; HTTP, the runner and gunicorn later."""
