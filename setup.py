"""Installs task_specific_learned_opt, its dependencies and the bin/ executables."""

import glob

import setuptools

setuptools.setup(
  name="task_specific_learned_opt",
  version="0.1.0",
  description=(
    "Learned optimizers trained with truncated unrolls and a merged reparameterisation/ES "
    "gradient estimator (Metz et al., ICML 2019)."
  ),
  packages=setuptools.find_packages(include=["task_specific_learned_opt*"]),
  python_requires=">=3.10",
  install_requires=[
    "tensorflow>=2.16",
    # keras_optimizer.py imports Keras 3 directly (TensorFlow 2.16+ installs it).
    "keras>=3",
    "tensorflow-datasets>=4.9",
    # tensorflow-datasets imports it but does not declare it.
    "importlib_resources>=5.0",
    "numpy>=1.26",
    "absl-py>=2.0",
    "gin-config>=0.5",
    "matplotlib>=3.7",
    # tf.summary needs it; TensorFlow does not install it.
    "tensorboard>=2.16",
  ],
  extras_require={
    # The tests run the examples too (tests/test_examples.py), so they need the examples' extra.
    "test": ["pytest>=7.4,<9.2", "pytest-xdist>=3.5", "ruff>=0.4", "scikit-learn>=1.3"],
    # examples/own_keras_model/ reads the digits bundled with scikit-learn.
    "examples": ["scikit-learn>=1.3"],
  },
  scripts=sorted(glob.glob("bin/*")),
)
