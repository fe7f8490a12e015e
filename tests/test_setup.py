"""The two-command set-up: Makefile targets, set-up scripts, CI entry point, README, Docker files.

Static checks plus behaviour of the small scripts with fake system tools (no network, no root
actions). The real set-up is exercised by running `make test` itself (CI does, from a fresh clone).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from airflow_compose import service_env

from dpngram.lm.kenlm_bin import KENLM_MAX_ORDER, KENLM_VERSION, kenlm_cache_bin_dir

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
SCRIPTS = ROOT / "scripts"
DOCKER = ROOT / "docker"

REQUIRED_TARGETS = ("setup", "test", "demo", "bench", "constraints", "lint", "clean")
DEBIAN_PACKAGES = (
    "build-essential",
    "cmake",
    "libboost-program-options-dev",
    "libboost-system-dev",
    "libboost-thread-dev",
    "libboost-test-dev",
    "zlib1g-dev",
    "libbz2-dev",
    "liblzma-dev",
    "chromium",  # the headless browser of the form and Data Docs tests
    "postgresql",  # the metadata DB and ledger of tests/test_platform.py (docker/compose.yaml)
    "redis-server",  # the Celery broker of tests/test_platform.py
)


def _make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def _rule(target: str) -> tuple[str, list[str]]:
    """(prerequisites, recipe lines) of `target:` in the Makefile."""
    lines = MAKEFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        match = re.match(rf"^{re.escape(target)}\s*:(?!=)(.*)$", line)
        if match:
            recipe = []
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                recipe.append(body.strip())
            return match.group(1).strip(), recipe
    raise AssertionError(f"Makefile has no rule for {target!r}")


# --------------------------------------------------------------------------- Makefile


def test_makefile_has_every_target_and_declares_them_phony():
    text = MAKEFILE.read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    assert phony, "Makefile has no .PHONY line"
    for target in REQUIRED_TARGETS:
        _rule(target)
        assert target in phony.group(1).split(), f"{target} is not .PHONY"


@pytest.mark.parametrize("target", ["test", "demo", "bench"])
def test_user_commands_do_the_setup_first(target):
    prerequisites, _ = _rule(target)
    assert "setup" in prerequisites.split()


def test_test_demo_bench_run_the_right_programs():
    assert any("-m pytest" in line for line in _rule("test")[1])
    assert any(re.search(r"bin/dpngram demo\b", line) for line in _rule("demo")[1])
    assert any("benchmarks/run_all.py" in line and "$(PLATFORM_TEST)" in line for line in _rule("bench")[1])
    assert any("ruff check" in line for line in _rule("lint")[1])
    assert any("uv pip freeze" in line for line in _rule("constraints")[1])


def test_setup_installs_with_the_constraints_file():
    script = (SCRIPTS / "make_venv.sh").read_text()
    # the developer environment: tests, the Spark engine and the benchmark-only libraries
    assert '-e ".[${DPNGRAM_EXTRAS:-dev,spark,bench,postgres,s3,celery}]" -c "$constraints"' in script
    assert "constraints-3.11.txt" in _rule("$(STAMP)")[0] or "$(CONSTRAINTS)" in _rule("$(STAMP)")[0]
    assert re.search(r"^CONSTRAINTS\s*:=\s*constraints-3\.11\.txt$", MAKEFILE.read_text(), re.M)


def test_venv_stamp_depends_on_project_metadata():
    prerequisites, recipe = _rule("$(STAMP)")
    assert "pyproject.toml" in prerequisites
    assert any("make_venv.sh" in line for line in recipe)
    assert re.search(r"^STAMP\s*:=\s*\$\(VENV\)/\.installed$", MAKEFILE.read_text(), re.M)


def test_clean_keeps_the_kenlm_cache():
    _, recipe = _rule("clean")
    joined = " ".join(recipe)
    assert "$(VENV)" in joined
    assert "KENLM" not in joined and ".cache" not in joined


def test_makefile_parses_and_dry_runs():
    for target in ("setup", "test", "demo", "bench", "lint", "help"):
        done = _make("-n", target)
        assert done.returncode == 0, done.stderr


def test_make_and_python_agree_on_the_kenlm_cache(tmp_path, monkeypatch):
    """The Makefile's KENLM_BIN (exported as DPNGRAM_KENLM_BIN) is where dpngram/lm/kenlm_bin.py looks."""
    for name in ("XDG_CACHE_HOME", "DPNGRAM_KENLM_BIN", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for xdg in (None, str(tmp_path / "xdg")):
        if xdg:
            monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        done = _make("-s", "print-DPNGRAM_KENLM_BIN", env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()) == kenlm_cache_bin_dir()
        assert kenlm_cache_bin_dir().is_relative_to(Path(xdg) if xdg else tmp_path / "home" / ".cache")
    assert _make("-s", "print-KENLM_MAX_ORDER").stdout.strip() == str(KENLM_MAX_ORDER)
    assert _make("-s", "print-KENLM_VERSION").stdout.strip() == KENLM_VERSION


def test_second_setup_has_nothing_to_do():
    """Under `make test` the set-up has just run: `make -q setup` must find everything up to date."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("no .venv/.installed stamp: run through `make test`")
    done = _make("-q", "setup")
    assert done.returncode == 0, "make -q setup: some set-up step would run again"


def test_setup_leaves_bytecode_so_processes_do_not_recompile():
    """`make setup` compiles the venv (uv writes no .pyc by default) and dpngram's own modules: with
    PYTHONDONTWRITEBYTECODE set, as here and in most container images, nothing else would ever
    cache them, and every CLI run or Airflow task recompiled ~7 s of imports."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("no .venv/.installed stamp: run through `make test`")
    import importlib
    import importlib.util

    for name in ("great_expectations", "polars", "dpngram.cli.main", "dpngram.stages.lm"):
        module = importlib.import_module(name)
        cached = Path(importlib.util.cache_from_source(module.__file__))
        assert cached.exists(), f"{module.__name__}: no bytecode at {cached}"
    assert "--compile-bytecode" in (SCRIPTS / "make_venv.sh").read_text()
    assert "scripts/make_venv.sh" in _rule("$(STAMP)")[0]


# --------------------------------------------------------------------------- CI entry point


def test_ci_run_calls_make_test_strictly():
    text = (ROOT / ".ci" / "run").read_text()
    assert text.startswith("#!/usr/bin/env bash") or text.startswith("#!/bin/bash")
    assert "set -euo pipefail" in text
    assert re.search(r"^\s*make test\b", text, re.M)
    syntax = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_ci_run_exits_with_the_make_status(tmp_path):
    """.ci/run runs `make test`, then `make test-platform` as a step of its own whatever the first
    did, and fails with the first failing step's status (both passing: it passes)."""
    ci = tmp_path / "repo" / ".ci"
    ci.mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", ci / "run")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for test_status, platform_status, expected in ((0, 0, 0), (3, 0, 3), (0, 4, 4), (3, 4, 3)):
        called = tmp_path / "called"
        called.unlink(missing_ok=True)
        fake_make = fake_bin / "make"
        fake_make.write_text(
            f'#!/bin/sh\necho "make $*" >> "{called}"\n'
            f'case "$1" in test) exit {test_status};; test-platform) exit {platform_status};; esac\nexit 99\n'
        )
        fake_make.chmod(0o755)
        done = subprocess.run(
            ["bash", str(ci / "run")],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}"),
            timeout=30,
        )
        assert done.returncode == expected, (test_status, platform_status, done.stderr)
        assert called.read_text().splitlines() == ["make test", "make test-platform"]


# --------------------------------------------------------------------------- README


def test_readme_shows_both_commands_near_the_top():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make demo" in head
    assert "make test" in head


def test_readme_is_a_short_front_door_that_says_what_dpngram_is_first():
    """The front door of issue 53: at most 150 lines, what dpngram is within the first 10 (the detail
    lives in docs/)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/"
    opening = " ".join(lines[:10])
    assert "dpngram turns private user text into" in opening
    assert "differentially private" in opening


# --------------------------------------------------------------------------- set-up scripts


def test_scripts_are_valid_bash():
    for script in sorted(SCRIPTS.glob("*.sh")):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"
    if shutil.which("shellcheck"):
        done = subprocess.run(
            ["shellcheck", "-x", *map(str, sorted(SCRIPTS.glob("*.sh")))],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stdout


def _fake_python(directory: Path, name: str, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text('#!/bin/sh\ncase "$2" in *executable*) echo "$0";; *) echo "' + version + '";; esac\n')
    path.chmod(0o755)
    return path


def _run_script(name: str, path_dirs: list[Path], *args: str, extra_env: dict[str, str] | None = None):
    # Only the fakes and a minimal tool dir: bash, coreutils (dirname, id, cut...) live in /usr/bin, /bin.
    env = {"PATH": ":".join([*map(str, path_dirs), "/usr/bin", "/bin"]), "HOME": os.environ.get("HOME", "/")}
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", str(SCRIPTS / name), *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_find_python_picks_a_311_interpreter(tmp_path):
    _fake_python(tmp_path / "a", "python3.11", "3.11")
    fake = tmp_path / "a" / "python3.11"
    done = _run_script("find_python.sh", [tmp_path / "a"], extra_env={"PYTHON": str(fake)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "a" / "python3.11")


def test_find_python_refuses_other_versions_with_one_clear_line(tmp_path):
    # PATH holds only the fakes and `dirname`: a real python3.11 in /usr/bin must not be found.
    fake_dir = tmp_path / "old"
    _fake_python(fake_dir, "python3.11", "3.10")
    _fake_python(fake_dir, "python3", "3.12")
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("dirname",):
        os.symlink(shutil.which(tool), tools / tool)
    env = {"PATH": f"{fake_dir}:{tools}", "HOME": os.environ.get("HOME", "/")}
    done = subprocess.run(
        [shutil.which("bash"), str(SCRIPTS / "find_python.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "needs Python 3.11" in lines[0]
    assert "python3.11=3.10" in lines[0] and "python3=3.12" in lines[0]


def _fake_dpkg_and_apt(
    directory: Path, installed: set[str], log: Path, uid: int = 0, sudo_ok: bool = False
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    names = " ".join(sorted(installed))
    scripts = {
        # dpkg-query -W -f='${db:Status-Status}' PKG
        "dpkg-query": (
            f'pkg="$3"; for p in {names}; do '
            '[ "$p" = "$pkg" ] && { printf installed; exit 0; }; done; exit 1\n'
        ),
        "apt-get": f'echo "apt-get $*" >> "{log}"\n',
        "id": f"echo {uid}\n",
        "sudo": (
            f'[ "$1" = "-n" ] || exit 1; shift; [ "$1" = true ] && exit 0; echo "sudo $*" >> "{log}"; "$@"\n'
            if sudo_ok
            else "exit 1\n"
        ),
    }
    for name, body in scripts.items():
        path = directory / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)


def test_system_deps_does_nothing_when_all_installed(tmp_path):
    log = tmp_path / "apt.log"
    _fake_dpkg_and_apt(tmp_path / "bin", set(DEBIAN_PACKAGES), log)
    done = _run_script("system_deps.sh", [tmp_path / "bin"])
    assert done.returncode == 0, done.stderr
    assert not log.exists()


def test_system_deps_updates_once_then_installs_only_the_missing(tmp_path):
    log = tmp_path / "apt.log"
    missing = {"libboost-test-dev", "liblzma-dev"}
    _fake_dpkg_and_apt(tmp_path / "bin", set(DEBIAN_PACKAGES) - missing, log)
    done = _run_script("system_deps.sh", [tmp_path / "bin"], "python3.11-dev")
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and calls[0].startswith("apt-get update")
    installed = calls[1].split()
    assert installed[:2] == ["apt-get", "install"] and "-y" in installed
    packages = {w for w in installed if not w.startswith("-")} - {"apt-get", "install"}
    assert packages == missing | {"python3.11-dev"}


def test_system_deps_uses_sudo_when_not_root(tmp_path):
    log = tmp_path / "apt.log"
    _fake_dpkg_and_apt(tmp_path / "bin", set(DEBIAN_PACKAGES) - {"cmake"}, log, uid=1000, sudo_ok=True)
    done = _run_script("system_deps.sh", [tmp_path / "bin"])
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("sudo apt-get update") and calls[2].startswith("sudo apt-get install")


def test_system_deps_fails_clearly_without_root_or_sudo(tmp_path):
    log = tmp_path / "apt.log"
    _fake_dpkg_and_apt(tmp_path / "bin", set(DEBIAN_PACKAGES) - {"cmake"}, log, uid=1000, sudo_ok=False)
    done = _run_script("system_deps.sh", [tmp_path / "bin"])
    assert done.returncode != 0
    assert "need root" in done.stderr and "ERROR" in done.stderr
    assert "Traceback" not in done.stderr
    assert not log.exists()


def test_kenlm_build_script_uses_the_matching_max_order():
    script = (SCRIPTS / "build_kenlm.sh").read_text()
    assert f'max_order="${{KENLM_MAX_ORDER:-{KENLM_MAX_ORDER}}}"' in script
    assert f'version="${{KENLM_VERSION:-{KENLM_VERSION}}}"' in script
    assert '-DKENLM_MAX_ORDER="$max_order"' in script
    assert "tools=(lmplz build_binary)" in script
    assert '"${tools[@]}"' in script.split("make -C", 1)[1].splitlines()[0]
    # the Python module is compiled with the same order (kenlm's setup.py reads $MAX_ORDER)
    assert 'export MAX_ORDER="${KENLM_MAX_ORDER:-6}"' in (SCRIPTS / "make_venv.sh").read_text()


def test_kenlm_build_is_a_no_op_when_the_tools_exist(tmp_path):
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    for tool in ("lmplz", "build_binary"):
        (prefix / "bin" / tool).write_text("#!/bin/sh\n")
        (prefix / "bin" / tool).chmod(0o755)
    done = _run_script(
        "build_kenlm.sh",
        [],
        extra_env={
            "KENLM_PREFIX": str(prefix),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "KENLM_PIP_PYTHON": "/nonexistent/python",
        },
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------- Docker


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = (DOCKER / "Dockerfile").read_text()
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = re.sub(r"\\\n", " ", kept)
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _dockerignore_includes(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent directory counts."""
    included = True
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if pattern.startswith("**/"):
            matched = any(fnmatch.fnmatch(p.split("/")[-1], pattern[3:]) for p in prefixes)
        else:
            depth = pattern.count("/")
            matched = any(fnmatch.fnmatch(p, pattern) and p.count("/") == depth for p in prefixes)
        if matched:
            included = negate
    return included


def test_dockerfile_bases_builds_kenlm_and_uses_constraints():
    instructions = _dockerfile_instructions()
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"
    assert all(rest.split()[0] == "${PYTHON_IMAGE}" for word, rest in instructions if word == "FROM")
    assert args["KENLM_MAX_ORDER"] == str(KENLM_MAX_ORDER)
    assert args["KENLM_VERSION"] == KENLM_VERSION
    runs = [rest for word, rest in instructions if word == "RUN"]
    assert any("scripts/system_deps.sh" in r for r in runs)
    kenlm_run = next(r for r in runs if "build_kenlm.sh" in r)
    assert "KENLM_MAX_ORDER=${KENLM_MAX_ORDER}" in kenlm_run
    assert "/opt/kenlm/bin/lmplz" in kenlm_run and "/opt/kenlm/bin/build_binary" in kenlm_run
    installs = [r for r in runs if "uv pip install" in r]
    assert installs and all("-c constraints-3.11.txt" in r for r in installs)
    env = " ".join(rest for word, rest in instructions if word == "ENV")
    for setting in (
        "AIRFLOW_HOME=/opt/airflow",
        "DPNGRAM_KENLM_BIN=/opt/kenlm/bin",
        "AIRFLOW__CORE__DAGS_FOLDER=/opt/dpngram/dags",
        "MAX_ORDER=${KENLM_MAX_ORDER}",
    ):
        assert setting in env
    assert any(word == "ENTRYPOINT" and "airflow" in rest for word, rest in instructions)
    assert any(word == "USER" and rest != "root" for word, rest in instructions)


def test_dockerfile_copies_only_existing_unignored_files():
    for word, rest in _dockerfile_instructions():
        if word != "COPY" or "--from=" in rest:
            continue
        sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert _dockerignore_includes(source), f"COPY {source}: excluded by .dockerignore"
    assert not _dockerignore_includes(".venv/bin/python")
    assert not _dockerignore_includes("src/dpngram/__pycache__/x.pyc")


def test_compose_runs_airflow_on_postgres_with_celery_workers():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    commands = {name: svc.get("command") for name, svc in services.items()}
    assert commands["airflow-api-server"] == ["api-server"]
    assert commands["airflow-scheduler"] == ["scheduler"]
    assert commands["airflow-dag-processor"] == ["dag-processor"]
    workers = [name for name, command in commands.items() if command == ["celery", "worker"]]
    assert len(workers) >= 2, workers
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    airflow_services = [n for n in services if n.startswith("airflow-")]
    for name in airflow_services:
        svc = services[name]
        env = service_env(name, compose)  # env_file (docker/airflow.env) + environment
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert "@postgres:5432/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        # one secret for all components, never a literal in the file
        jwt_secret = env["AIRFLOW__API_AUTH__JWT_SECRET"]
        assert jwt_secret.startswith("${") and ":?" in jwt_secret
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0"
        assert svc["build"]["dockerfile"] == "docker/Dockerfile" and svc["build"]["context"] == ".."
        assert env["DPNGRAM_DEMO_DIR"] == "/data/dpngram" and env["DPNGRAM_OUT"].startswith("s3://")
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", *workers):
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "healthcheck" in services[name]
    init = " ".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init and "pools set" not in init  # no pool: the ledger serialises
    named = set(compose["volumes"])
    for svc in services.values():
        for volume in svc.get("volumes", []):
            assert volume.split(":")[0] in named


def test_docker_readme_explains_build_and_run():
    text = (DOCKER / "README.md").read_text()
    assert "docker build -f docker/Dockerfile" in text
    assert "docker compose" in text and "compose.yaml" in text
    required = (
        "POSTGRES_PASSWORD",
        "AIRFLOW_FERNET_KEY",
        "AIRFLOW_JWT_SECRET",
        "AIRFLOW_API_SECRET_KEY",
        "DPNGRAM_LEDGER_PASSWORD",
        "DPNGRAM_S3_ENDPOINT",
    )
    for variable in required:
        assert variable in text
