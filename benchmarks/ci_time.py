"""How long CI takes from a fresh clone: `bash .ci/run` timed, with the test suite's own summary.

Clones the repository at HEAD (or --commit) into a new directory, runs `bash .ci/run` there (a
new virtual environment, the install, ruff, then the tests as the README runs them) and writes
the wall-clock of the whole job, pytest's counts and its own duration, the machine's load
average before and after, and the CPU time the job used (its children's user and system time).

  python benchmarks/ci_time.py --output benchmarks/results/ci_time.json
"""

import os
import platform
import re
import resource
import subprocess
import tempfile
import time

from absl import app, flags

from task_specific_learned_opt import files

FLAGS = flags.FLAGS
flags.DEFINE_string("commit", "HEAD", "The commit to clone and run.")
flags.DEFINE_string("output", None, "Where the JSON goes (default: printed only).")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# pytest's last line, e.g. "1323 passed, 2 skipped in 652.31s (0:10:52)".
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[\d.]+)s", re.M)


def run_ci(commit: str) -> dict:
  """Clones `commit` into a temporary directory and times `bash .ci/run` there."""
  sha = subprocess.run(
    ["git", "-C", REPO, "rev-parse", commit], check=True, capture_output=True, text=True
  ).stdout.strip()
  with tempfile.TemporaryDirectory() as root:
    clone = os.path.join(root, "clone")
    subprocess.run(["git", "clone", "-q", REPO, clone], check=True)
    subprocess.run(["git", "-C", clone, "checkout", "-q", sha], check=True)
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
  output = done.stdout + done.stderr
  summaries = list(SUMMARY.finditer(output))
  if not summaries:
    raise RuntimeError(f"No pytest summary in the output of .ci/run:\n{output[-3000:]}")
  last = summaries[-1]
  counts = {
    word: int(number)
    for number, word in (part.split(" ", 1) for part in last["counts"].split(", "))
  }
  cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
  return {
    "commit": sha,
    "exit_status": done.returncode,
    "seconds": seconds,
    "pytest_seconds": float(last["seconds"]),
    "pytest_counts": counts,
    "cpu_seconds": cpu,
    "load_average_before": load_before,
    "load_average_after": os.getloadavg(),
    "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
  }


def main(argv):
  del argv
  found = run_ci(FLAGS.commit)
  print(found)
  if FLAGS.output:
    files.write_json(FLAGS.output, found)
    print("Wrote", FLAGS.output)


if __name__ == "__main__":
  app.run(main)
