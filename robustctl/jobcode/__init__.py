"""A job's code and progress: git work trees on its hosts, hot update, rollback, the progress signal.

ByteRobust (arXiv 2509.16293, §6.1) keeps a job's code as a versioned artefact: an update is staged and
applied at the next restart (lazy hot update, forced when its window expires; urgent ones restart at
once), and a job that fails after a change goes back to the last version that ran stably. Here:

* :mod:`robustctl.jobcode.git`: resolve a ref to a commit on every host, read each host's current
  version, and check a commit out on every host all-or-none (:func:`~robustctl.jobcode.git.switch_code`);
* :mod:`robustctl.jobcode.progress`: read the job's progress signal (heartbeat files or a log line
  pattern) on every host, bounded (:func:`~robustctl.jobcode.progress.read_progress`);
* :mod:`robustctl.jobcode.records`: the store's code changes and job versions, what is pending
  (:func:`~robustctl.jobcode.records.pending_update`), stability
  (:func:`~robustctl.jobcode.records.evaluate_stability`, :func:`~robustctl.jobcode.records.last_stable_version`).

The commands are :mod:`robustctl.commands.update` (``update stage``, ``update list``, ``rollback``) and
:mod:`robustctl.commands.progress` (``wait-for-progress``).
"""
