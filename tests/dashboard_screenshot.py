"""Write the README's dashboard screenshot (``docs/dashboard.png``) from a real run.

    .venv/bin/python tests/dashboard_screenshot.py [OUT.png]

Runs the burst word count on ``local[2]`` with the dashboard on a free 127.0.0.1 port and the
Spark UI on (bound to 127.0.0.1 like every local Spark address). Its counter fails one
transaction's job for good once (every Spark attempt of it raises), so the page shows a
recovery (the ROLLBACK, the INITSTATE, the retried transaction) and an error with its
traceback; ``topology.max.spout.pending`` bounds the pending trees the page shows against it.
When the topology is idle, headless Chromium takes the picture (1400x1600): the rates, the
task rows, capacity, the history charts (durations, state size, state change bytes) and the
error.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from ui_browser import screenshot  # noqa: E402
from ui_topologies import flaky_wordcount, snapshot, wait_for  # noqa: E402

from statefulbolts import LocalCluster  # noqa: E402

TASK_ATTEMPTS = 4  # local[2] becomes local[2,4]


def main(argv: list[str]) -> int:
    """Run, picture, stop."""
    out = Path(argv[0]) if argv else HERE.parent / "docs" / "dashboard.png"
    conf = {
        "topology.ui.port": 0,
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": 120,
    }
    spark_conf = {"spark.ui.enabled": "true", "spark.ui.port": "0"}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(spark_conf=spark_conf) as cluster:
        log = str(Path(tmp) / "flaky.log")
        topology = flaky_wordcount(1200, 60, "storm", log, TASK_ATTEMPTS)
        handle = cluster.submit_topology("wordcount", conf, topology)
        try:
            handle.await_idle(300)
            url = handle.ui_url
            assert url is not None
            # The state size after the last commit (counted at most an interval late).
            committed = handle.status()["checkpoint"]

            def counted() -> bool:
                points = snapshot(url)["history"]["state_keys"].get("count") or []
                return bool(points) and f"COMMITTED({points[-1][1]})" == committed

            wait_for(counted, 60, "the state size after the last commit")
            screenshot(url, out, size=(1400, 1600))
        finally:
            handle.kill()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
