"""Rendering: rich views on stderr, JSON documents on stdout."""
