"""Functions that trace once per task variant on purpose, without TensorFlow's retracing warning.

The project's compiled inner-training functions (a worker's truncation sample, an evaluation's
init, run and metrics) take a task's data as an argument, so one trace serves every task of a
family. A family of Keras models with several variants (tasks/keras_task.py: widths, depths,
activations) puts the variant's key in the data's structure, so these functions trace once per
variant, by design: each variant is another graph. TensorFlow's frequent-retracing detector
counts traces per Python code object, not per function or input structure, and after 5 traces
in 10 calls it prints a page-long warning ("... triggered tf.function retracing ...") once per
function, a dozen of them in a run of examples/own_keras_model. `traces_per_variant` marks such
a function so that the detector leaves it alone; a function traced for the same structure twice
would still show in its `experimental_get_tracing_count()`. The chief's update is marked for the
same reason: each chief compiles its own, so a process that makes several (a seed study) traces
one code object once per chief.
"""

from typing import Any


def traces_per_variant(function: Any) -> Any:
  """Marks a tf.function traced once per input structure on purpose; returns it.

  Args:
    function: the tf.function (a polymorphic Function).
  """
  # The attribute tf.function's detector reads (polymorphic_function.Function) to skip warnings.
  function._omit_frequent_tracing_warning = True
  return function
