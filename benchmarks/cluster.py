"""Throughput of the cluster path: the chief's capacity and a worker's overhead per sample.

  python benchmarks/cluster.py --output benchmarks/results/cluster_capacity.json

Starts the real chief role (cluster.run_chief: dequeue, filter, merge, Adam, publish theta,
summaries and progress.jsonl every step) in this process with theta of the paper's size (the MLP
optimizer's 610 meta-parameters) and batch 128, and, in separate processes on loopback:
  - stand-in workers that push random samples as fast as they can (128 per enqueue call), so
    the queue never runs dry and the chief's own speed is what is measured;
  - a probe worker that does what a real worker does per sample, one theta read and one
    single-sample enqueue, and times both while the chief is under that load.
Reports the chief's applied samples/s (steps after a warm-up) and the probe's milliseconds.
With --num_pushers 0 only the probe feeds the chief (--num_steps 3), which is the load 128 real
workers put on it (a sample takes them seconds): the probe then measures a worker's overhead.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags, logging  # noqa: E402

from task_specific_learned_opt import files, gin_config, nests  # noqa: E402
from task_specific_learned_opt.distributed import (  # noqa: E402
  base,
  cluster,
  cluster_spec,
  launch,
  outer_training,
  progress,
  tf_runtime,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt  # noqa: E402
from task_specific_learned_opt.tasks import quadratic  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("role", "chief", ["chief", "pusher", "probe"], "This process's part.")
flags.DEFINE_string("cluster", None, "Set by the chief for the stand-in processes.")
flags.DEFINE_integer("num_pushers", 2, "Stand-in worker processes pushing random samples.")
flags.DEFINE_integer("num_steps", 150, "Outer steps the chief applies (batch 128).")
flags.DEFINE_integer("warmup_steps", 20, "Steps not counted.")
flags.DEFINE_integer("probe_samples", 400, "Samples the probe worker times.")
flags.DEFINE_string("output", None, "Where the JSON results go (else printed only).")

BATCH = 128
BINDINGS = [
  "outer_training.batch_size = 128",
  "run_chief.linger_secs = 0",
  "run_chief.poll_secs = 0.001",
]


def _random_batch(num_params, rng, version, incarnation, first_index):
  return base.Sample(
    g_rp=rng.standard_normal([BATCH, num_params]).astype(np.float32),
    g_es=rng.standard_normal([BATCH, num_params]).astype(np.float32),
    loss_plus=rng.uniform(size=BATCH).astype(np.float32),
    loss_minus=rng.uniform(size=BATCH).astype(np.float32),
    theta_version=np.full(BATCH, version, np.int64),
    num_steps=np.full(BATCH, 50, np.int32),
    inner_step=np.zeros(BATCH, np.int32),
    worker_id=np.zeros(BATCH, np.int32),
    worker_run=np.full(BATCH, rng.integers(1, 2**62), np.int64),
    sample_index=np.arange(first_index, first_index + BATCH, dtype=np.int64),
    incarnation=np.full(BATCH, incarnation, np.int64),
  )


def _stand_in(spec, probe):
  gin_config.parse([], BINDINGS)  # The chief's experiment, so that the fingerprints agree.
  template = tf.nest.map_structure(np.asarray, mlp_lopt.MLPLOpt().init(0))
  num_params = nests.flatten_numpy(template).size
  transport = tf_runtime.TFRuntimeTransport(
    f"grpc://{spec['chief'][0]}",
    num_params,
    tf_runtime.fingerprint(template),
    batch_size=BATCH,
    chief_timeout_secs=5.0,  # The chief exits at once when it has finished.
  )
  rng = np.random.default_rng()
  reads, puts, index = [], [], 0
  try:
    transport.read_theta()  # Waits until the chief is up.
    while True:
      start = time.perf_counter()
      published = transport.read_theta()
      read = time.perf_counter()
      if published is None:
        break
      version = published[1]
      if probe:
        g = rng.standard_normal(num_params).astype(np.float32)
        transport.put_sample(base.Sample(g, g, 1.0, 1.0, version, 50, 0, 99, 1, index))
        reads.append(read - start)
        puts.append(time.perf_counter() - read)
        index += 1
        if index >= FLAGS.probe_samples:
          break
        time.sleep(0.01)  # A real worker computes between samples.
      else:
        transport.put_batch(_random_batch(num_params, rng, version, transport.incarnation, index))
        index += BATCH
  except tf_runtime.ChiefUnreachableError:
    pass
  if probe:
    print(
      json.dumps(
        {
          "read_ms": 1000 * np.median(reads),
          "enqueue_ms": 1000 * np.median(puts),
          "read_p90_ms": 1000 * np.percentile(reads, 90),
          "enqueue_p90_ms": 1000 * np.percentile(puts, 90),
          "num": len(reads),
        }
      ),
      flush=True,
    )


def main(argv):
  del argv
  if FLAGS.role != "chief":
    _stand_in(json.loads(FLAGS.cluster), FLAGS.role == "probe")
    return
  gin_config.parse([], BINDINGS)
  num_stand_ins = FLAGS.num_pushers + 1
  spec_dict = launch.loopback_cluster(num_stand_ins)
  spec = cluster_spec.TaskSpec(spec_dict, "chief", 0)
  script = os.path.abspath(__file__)
  processes = [
    subprocess.Popen(
      [
        sys.executable,
        script,
        f"--role={role}",
        f"--cluster={json.dumps(spec_dict)}",
        f"--probe_samples={FLAGS.probe_samples}",
      ],
      stdout=subprocess.PIPE,
      text=True,
    )
    for role in ["probe"] + ["pusher"] * FLAGS.num_pushers
  ]
  train_dir = tempfile.mkdtemp()
  setup = outer_training.outer_training(
    family=quadratic.QuadraticFamily(dim=4),  # Not used by the chief.
    lopt=mlp_lopt.MLPLOpt(),
    num_outer_steps=FLAGS.num_steps,
    checkpoint_every_secs=1e9,
    log_every=50,
  )
  try:
    cluster.run_chief(train_dir, spec, setup)
  finally:
    probe_out = processes[0].communicate(timeout=120)[0]
    for p in processes[1:]:
      p.kill()
  records = progress.read_records(train_dir)
  probe = json.loads(probe_out.strip().splitlines()[-1])
  result = {"batch_size": BATCH}
  if FLAGS.num_pushers:
    start, end = records[FLAGS.warmup_steps - 1], records[-1]
    steps = end["outer_step"] - start["outer_step"]
    seconds = end["elapsed_seconds"] - start["elapsed_seconds"]
    per_step = [r["seconds"] for r in records[FLAGS.warmup_steps :]]
    result.update(
      chief_samples_per_second=steps * BATCH / seconds,
      chief_steps_per_second=steps / seconds,
      apply_ms_median=1000 * float(np.median(per_step)),
      steps_timed=steps,
      dropped=sum(r["num_dropped"] + r["num_lost_theta"] + r["num_duplicate"] for r in records),
    )
  result.update(
    {
      "num_meta_parameters": int(nests.flatten_numpy(mlp_lopt.MLPLOpt().init(0)).size),
      "num_pushers": FLAGS.num_pushers,
      "probe_worker": probe,
      "cpu_count": os.cpu_count(),
      "load_average": os.getloadavg(),
      "gin": gin.config_str(),
    }
  )
  logging.info("%s", json.dumps({k: v for k, v in result.items() if k != "gin"}, indent=1))
  if FLAGS.output:
    files.write_json(FLAGS.output, result, indent=1)


if __name__ == "__main__":
  app.run(main)
