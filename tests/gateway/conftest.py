"""Fixtures of the gateway tests: sample granules, their sidecars, fresh read caches."""

from tests._granules import *
