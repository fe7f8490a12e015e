"""A non-editable install (a built wheel, no repository) runs `dpngram run` and parses the DAG.

The wheel is built from this checkout (setuptools, as `pip install .` would) and unpacked into a
directory that is put first on PYTHONPATH; the commands run from a directory outside the repository,
so nothing can be read from the source tree (SQL included: it ships as ``dpngram.sql`` package data).
The third-party dependencies come from the test environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, unpacked (what a non-editable install puts in site-packages)."""
    wheels = tmp_path_factory.mktemp("wheel")
    uv = Path(sys.executable).with_name("uv")
    command = (
        [str(uv), "build", "--wheel", "--out-dir", str(wheels), str(ROOT)]
        if uv.exists()
        else [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(ROOT)]
    )
    build = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("dpngram-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert any(n.startswith("dpngram/sql/dpne/") and n.endswith(".sql") for n in names)
        assert not any(n.startswith(("pipeline/", "lm/", "sql/")) for n in names), "only the dpngram package"
        archive.extractall(site)
    return site


def _env(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYTHONPATH": str(site), **extra})
    return env


def test_the_installed_package_runs_a_release_outside_the_repository(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = _env(installed)
    where = subprocess.run(
        [sys.executable, "-c", "import dpngram, dpngram.engines.sql as s; print(dpngram.__file__)"],
        capture_output=True, text=True, cwd=work, env=env, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed)  # not the editable source tree

    cli = [sys.executable, "-m", "dpngram.cli"]
    sample = subprocess.run(
        [*cli, "sample", "--out", str(work / "sample"), "--users", "600", "--seed", "7"],
        capture_output=True, text=True, cwd=work, env=env, timeout=300,
    )  # fmt: skip
    assert sample.returncode == 0, sample.stderr[-3000:]
    users = next((work / "sample").glob("users*"))
    public = next((work / "sample").glob("public*"))
    run = subprocess.run(
        [*cli, "run", "--input", str(users), "--public", str(public), "--out", str(work / "out"),
         "--warehouse", str(work / "wh.duckdb"), "--max-n", "3", "--delta", "1e-5",
         "--stage-budget", "dpne=0.6,bayes=0.4", "--lm-route", "off", "--json", "--quiet"],
        capture_output=True, text=True, cwd=work, env=env, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    release = Path(summary["release"])
    assert release.is_relative_to(work / "out")
    expected = ("vocabulary", "kgrams", "trigram_dist")
    for relative in (*(f"released/{t}.parquet" for t in expected), "report.json", "validation/results.json"):
        assert (release / relative).is_file(), relative
    assert summary["validation_passed"] is True


def test_the_dag_parses_from_the_installed_package(installed: Path, tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    env = _env(
        installed,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        DPNGRAM_DEMO_DIR=str(tmp_path / "demo"),
        DPNGRAM_OUT=str(tmp_path / "out"),
    )
    code = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(ROOT / 'dags')!r})\n"
        "import dpngram\n"
        "print(dpngram.__file__)\n"
        "print(sorted(bag.import_errors))\n"
        "from dpngram.orchestration.plan import TASKS\n"
        "print(len(bag.dags['dpngram_release'].tasks) == len(TASKS) + 3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    module, errors, tasks = result.stdout.strip().splitlines()[-3:]
    assert Path(module).is_relative_to(installed) and errors == "[]"
    assert tasks == "True"  # privacy_precheck, the plan's tasks, publish, publish_lm
