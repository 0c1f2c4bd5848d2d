"""Helpers and fixtures shared by the tests (a package, so tests import `support.helpers`)."""
