"""App. A's closed form of the outer-gradient of a learned learning rate, evaluated in numpy.

Gradient descent w_{t+1} = w_t - theta g_t with a learned learning rate theta has (App. A)

  d l(w_T) / d theta = < g_T, d w_T / d theta >,
  d w_T / d theta = - sum_{i=0}^{T-1} ( prod_{j=i+1}^{T-1} (I - theta H_j) ) g_i,

with g_t and H_t the gradient and Hessian of the loss at w_t. On a quadratic with Hessian H the
growth rate per step is rho = max_lambda |1 - theta lambda| (`spectral_radius`), and `fit_slope`
measures it from derivatives at many T. Everything here is float64 numpy, independent of the
TensorFlow unroll it checks.
"""

from collections.abc import Sequence

import numpy as np


def gradient_descent_gradients(
  hessian: np.ndarray, center: np.ndarray, w0: np.ndarray, theta: float, num_steps: int
) -> np.ndarray:
  """The gradients g_0..g_T of gradient descent on l(w) = 1/2 (w - c)^T H (w - c), in float64.

  Args:
    hessian: H, [dim, dim].
    center: c, [dim].
    w0: the initial parameters, [dim].
    theta: the learning rate.
    num_steps: T.

  Returns:
    [T + 1, dim]: row t is g_t = H (w_t - c), with w_{t+1} = w_t - theta g_t.
  """
  hessian = np.asarray(hessian, np.float64)
  w = np.asarray(w0, np.float64).copy()
  center = np.asarray(center, np.float64)
  grads = []
  for _ in range(num_steps + 1):
    g = hessian @ (w - center)
    grads.append(g)
    w = w - theta * g
  return np.stack(grads)


def closed_form_dw_dtheta(grads: np.ndarray, hessians: np.ndarray, theta: float) -> np.ndarray:
  """App. A's d w_T / d theta = -sum_{i<T} (prod_{j=i+1}^{T-1} (I - theta H_j)) g_i.

  The product is ordered as the chain rule gives it, (I - theta H_{T-1}) ... (I - theta H_{i+1});
  it is built from i = T-1 down to 0, one matrix product per term.

  Args:
    grads: [T + 1, dim] (or [T, dim]) gradients g_0.. of the run; g_T is not used.
    hessians: [T, dim, dim] Hessians H_0..H_{T-1}, or one [dim, dim] Hessian for every step.
    theta: the learning rate.

  Returns:
    [dim], float64.
  """
  grads = np.asarray(grads, np.float64)
  num_steps = len(hessians) if np.ndim(hessians) == 3 else len(grads) - 1
  dim = grads.shape[1]
  identity = np.eye(dim)

  def hessian(j: int) -> np.ndarray:
    return np.asarray(hessians[j] if np.ndim(hessians) == 3 else hessians, np.float64)

  total = np.zeros(dim)
  product = identity  # prod_{j=i+1}^{T-1} (I - theta H_j), empty (I) for i = T-1.
  for i in range(num_steps - 1, -1, -1):
    total += product @ grads[i]
    product = product @ (identity - theta * hessian(i))
  return -total


def closed_form_dloss_dtheta(grads: np.ndarray, hessians: np.ndarray, theta: float) -> float:
  """App. A's d l(w_T) / d theta = <g_T, d w_T / d theta> (closed_form_dw_dtheta).

  Args:
    grads: [T + 1, dim] gradients g_0..g_T of the run.
    hessians: [T, dim, dim] Hessians H_0..H_{T-1}, or one [dim, dim] Hessian for every step.
    theta: the learning rate.
  """
  grads = np.asarray(grads, np.float64)
  return float(grads[-1] @ closed_form_dw_dtheta(grads, hessians, theta))


def spectral_radius(curvatures: Sequence[float], theta: float) -> float:
  """rho = max_i |1 - theta lambda_i|, the spectral radius of I - theta H for H = diag(lambda).

  Args:
    curvatures: the eigenvalues lambda_i of H.
    theta: the learning rate.
  """
  return float(np.max(np.abs(1.0 - theta * np.asarray(curvatures, np.float64))))


def fit_slope(num_steps: np.ndarray, values: np.ndarray) -> float:
  """The least-squares slope of log|values| against num_steps (natural log, per step).

  Args:
    num_steps: the T values.
    values: the derivatives at those T.
  """
  return float(np.polyfit(np.asarray(num_steps, np.float64), np.log(np.abs(values)), 1)[0])
