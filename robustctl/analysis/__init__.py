"""Offline analysis of saved artefacts: nccl-tests output, kernel logs with XID lines, ``dcgmi diag``."""
