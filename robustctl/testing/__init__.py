"""Public fakes for tests and plugin authors.

- :mod:`robustctl.testing.fake_nvml`: :class:`~robustctl.testing.fake_nvml.FakeGpu` states, the NVML
  injection file the ``nvml`` probe reads (:func:`~robustctl.testing.fake_nvml.write_injection`), and
  :class:`~robustctl.testing.fake_nvml.FakeNvml`, a pynvml look-alike.
- :mod:`robustctl.testing.fake_transport`: a scripted Transport.
- :mod:`robustctl.testing.fake_kube`: :class:`~robustctl.testing.fake_kube.FakeKubeApiServer`, a fake
  Kubernetes API server (Nodes, Pods, an Indexed Job, PodDisruptionBudgets, the Eviction API) for the
  real ``kubernetes`` client.

Import the submodules directly; this package imports nothing heavy.
"""
