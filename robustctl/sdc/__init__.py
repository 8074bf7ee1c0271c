"""Silent data corruption (SDC): dual-phase replay grouping, the replay rounds and their verdicts.

Modules: :mod:`~robustctl.sdc.grouping` (which machines replay together, pure),
:mod:`~robustctl.sdc.verdict` (digest comparison and the verdict, pure),
:mod:`~robustctl.sdc.replay` (the two rounds over the transports). ``robustctl replay-sdc``
(:mod:`robustctl.commands.replay_sdc`) ties them together.
"""
