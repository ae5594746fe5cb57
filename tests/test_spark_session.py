"""What ``build_session`` sets for local masters: loopback binding and the driver JVM's options."""

from __future__ import annotations

from typing import Any

from statefulbolts.runtime._spark import (
    LOCAL_JVM_OPTIONS,
    LOOPBACK,
    local_jvm_settings,
    loopback_settings,
    with_task_retries,
)


def test_local_jvm_runs_c1_only_unless_the_user_chose_options():
    assert local_jvm_settings() == {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    assert local_jvm_settings({"spark.driver.extraJavaOptions": "-Xss4m"}) == {}
    assert local_jvm_settings({"spark.driver.extraJavaOptions": ""}) == {}


def test_loopback_settings_keep_what_the_user_set():
    settings = loopback_settings({"spark.driver.host": "10.0.0.5"})
    assert "spark.driver.host" not in settings
    assert settings["spark.driver.bindAddress"] == LOOPBACK


def test_local_masters_retry_tasks_like_a_cluster():
    assert with_task_retries("local[2]", 4) == "local[2,4]"
    assert with_task_retries("local", 3) == "local[1,3]"
    assert with_task_retries("local[2,1]", 4) == "local[2,1]"
    assert with_task_retries("spark://127.0.0.1:7077", 4) == "spark://127.0.0.1:7077"


def test_the_shared_local_session_got_loopback_and_the_jvm_options(spark: Any):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == LOOPBACK
    assert conf.get("spark.driver.bindAddress") == LOOPBACK
    assert conf.get("spark.driver.extraJavaOptions").endswith(LOCAL_JVM_OPTIONS)
    # The running JVM really took the flag (it was started with it, not just told about it).
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert LOCAL_JVM_OPTIONS in args
