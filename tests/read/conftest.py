"""Fixtures of the read-path tests: sample granules, their sidecars, fresh read caches."""

from tests._granules import *
