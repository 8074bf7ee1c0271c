"""Checks: node-side observations (collected by probes) judged by pure evaluate functions."""
