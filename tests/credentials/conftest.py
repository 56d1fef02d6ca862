"""Fixtures of the credentials tests: sample granules, and fresh read caches for every test."""

from tests._granules import *
