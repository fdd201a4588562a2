"""The random search's space: every hyper-parameter sampled in its range, reproducibly."""

import numpy as np

from task_specific_learned_opt.evaluation import search_space


def test_random_search_samples_every_hyperparameter_in_range_reproducibly():
  for kind in ("adam", "rmsprop", "sgdm"):
    configs = [search_space.sample_hparams(kind, 0, i) for i in range(200)]
    assert configs[3] == search_space.sample_hparams(kind, 0, 3)
    assert set(configs[0]) == set(search_space.HPARAMS[kind])
    for name, (low, high) in search_space.LOG_UNIFORM.items():
      if name in configs[0]:
        values = np.array([c[name] for c in configs])
        assert low <= values.min() and values.max() <= high
        # Uniform in log space: about half below the geometric middle.
        assert 0.35 < np.mean(values < np.sqrt(low * high)) < 0.65
  adam = [search_space.sample_hparams("adam", 0, i) for i in range(200)]
  assert all(0 <= c["beta1"] <= 0.999 and 0 <= c["beta2"] <= 1 - 1e-5 for c in adam)
  assert {
    c["nesterov"] for c in (search_space.sample_hparams("sgdm", 0, i) for i in range(20))
  } == {
    False,
    True,
  }
