import pytest  # noqa: F401
