"""Public fakes for tests and plugin authors.

- :mod:`robustctl.testing.fake_nvml`: :class:`~robustctl.testing.fake_nvml.FakeGpu` states, the NVML
  injection file the ``nvml`` probe reads (:func:`~robustctl.testing.fake_nvml.write_injection`), and
  :class:`~robustctl.testing.fake_nvml.FakeNvml`, a pynvml look-alike.
- :mod:`robustctl.testing.fake_transport`: a scripted Transport.

Import the submodules directly; this package imports nothing heavy.
"""
