"""Silent data corruption (SDC): dual-phase replay grouping, the replay rounds and their verdicts.

Modules: :mod:`~robustctl.sdc.grouping` (which machines replay together, pure),
:mod:`~robustctl.sdc.verdict` (digest comparison and the verdict, pure),
:mod:`~robustctl.sdc.replay` (the two rounds over the transports), :mod:`~robustctl.sdc.run` (one
run's layout, command, plan, rounds and suspects) and :mod:`~robustctl.sdc.result` (the plan and result
documents). ``robustctl replay-sdc`` (:mod:`robustctl.commands.replay_sdc`) builds the request and
calls them.
"""
