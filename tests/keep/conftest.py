from tests.cli.conftest import clean

__all__ = ["clean"]
