"""The worker daemon of local masters takes Spark's redundant archives off its path.

Spark puts ``pyspark.zip``, py4j's zip and the ``spark-core`` jar first on a worker's path; with
them there, every new worker (and, on PySpark 3.5, every task) re-read their directories
(``importlib.invalidate_caches``) and compiled PySpark's worker from source. Where the same
pyspark is installed as plain files, the daemon drops them (``_daemon.use_installed_packages``).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from statefulbolts.runtime._daemon import redundant_archives


def _package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "__init__.py").write_text("")


def _archive(path: Path, *names: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zipped:
        for name in names:
            zipped.writestr(name, "")
    return str(path)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with pyspark and py4j installed, pyspark's archives in its folder."""
    site = tmp_path / "site"
    _package(site, "pyspark")
    _package(site, "py4j")
    return site


def test_the_installed_pyspark_s_own_archives_are_redundant(site: Path) -> None:
    lib = site / "pyspark" / "python" / "lib"
    zipped = _archive(lib / "pyspark.zip", "pyspark/__init__.py", "pyspark/worker.py")
    py4j = _archive(lib / "py4j-0.10.9-src.zip", "py4j/__init__.py")
    jar = _archive(site / "pyspark" / "jars" / "spark-core.jar", "org/apache/spark/A.class")
    path = [zipped, py4j, jar, str(site)]
    assert redundant_archives(path) == [zipped, py4j, jar]


def test_an_archive_with_python_not_installed_as_files_stays(site: Path) -> None:
    lib = site / "pyspark" / "python" / "lib"
    extra = _archive(lib / "extra.zip", "pyspark/__init__.py", "onlyhere/__init__.py")
    module = _archive(lib / "single.zip", "solo.py")
    compiled = _archive(lib / "compiled.zip", "fast/__init__.pyc")  # Python, though no source
    assert redundant_archives([extra, module, compiled, str(site)]) == []
    (site / "solo.py").write_text("")  # a module installed as a file
    assert redundant_archives([extra, module, str(site)]) == [module]


def test_archives_of_another_spark_stay(site: Path, tmp_path: Path) -> None:
    # SPARK_HOME elsewhere: its pyspark.zip may be another version than the installed one.
    other = _archive(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip", "pyspark/a.py")
    unreadable = site / "pyspark" / "python" / "lib" / "broken.zip"
    unreadable.parent.mkdir(parents=True)
    unreadable.write_text("not a zip")
    assert redundant_archives([other, str(unreadable), str(site)]) == []


def test_without_an_installed_pyspark_nothing_is_redundant(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "pyspark" / "python" / "lib"
    zipped = _archive(lib / "pyspark.zip", "pyspark/__init__.py")
    assert redundant_archives([zipped, str(tmp_path / "site")]) == []


@pytest.mark.spark
def test_local_workers_import_the_installed_pyspark(spark: Any) -> None:
    def where(items: Any) -> Any:
        for _ in items:
            pass
        import os

        # Spark's own archives, all in pyspark's folder (an extlib zip may be on the path too).
        spark_s = f"{os.sep}pyspark{os.sep}"
        archives = [p for p in sys.path if spark_s in p and p.endswith((".zip", ".jar"))]
        cached = sys.path_importer_cache
        importers = [k for k in cached if spark_s in k and (".zip" in k or ".jar" in k)]
        yield sys.modules["pyspark"].__file__, archives, importers

    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(where).collect()
    assert len(seen) == 2
    for file, archives, importers in seen:
        assert ".zip" not in file, file
        assert archives == [] and importers == [], (archives, importers)
