"""Releases in object storage and workers that share no disk (issue 50), against a real S3 API.

One moto S3 server (a subprocess speaking the S3 HTTP API, :class:`platform_harness.S3Server`)
serves the whole module; every test writes under a prefix of its own. What is covered:

* a whole release with ``OUT = s3://...`` (:func:`dpngram.orchestration.plan.run_release`): the
  objects of ``OUT/DATASET/runs/RUN_ID/`` are exactly the files the manifest lists, byte for byte
  (size and SHA-256 recomputed from S3); the pointer ``latest.json`` names the run and its
  manifest; a reader finds it (:func:`latest_release`) and downloads a verified KenLM model
  (:func:`fetch_verified`); the run's staging and private DuckDB file are gone, the ledger closed
  the run, and nothing of the release was written to the local disk outside the warehouse;
* tampering: changed bytes of a released object, a pointer or a manifest that do not match, are
  refused with one line (:class:`ChecksumMismatch`);
* atomic for readers: a publish killed in the middle of the upload leaves the pointer at the
  previous release (or none), is never completed by :func:`complete_publishes` (it is not a
  complete release) and is finished by the next publish; a publish killed between the manifest and
  the pointer is finished by :func:`complete_publishes`;
* the newest release wins: completing an older run's interrupted publish after a newer release
  never moves the pointer back;
* the Airflow asset metadata and keys of a release on S3 (URLs, SHA-256 from the manifest);
* the run store (``DPNGRAM_RUN_STORE``): the release DAG's tasks run one after another on two
  "workers" with their own warehouse directories, the ledger on PostgreSQL and OUT on S3, each task
  inside :func:`task_scope` as ``dags/dpngram_release.py`` runs it; the release publishes, a worker
  only ever holds files it pulled from the store or produced itself, the run's prefix in the store
  and every worker's private copy go afterwards, and the ledger holds one charge per stage adding
  up to the run's epsilon, also when a stage's task is killed after pushing its noisy output and
  Airflow retries it on the other worker (reused, charged once);
* :meth:`RunStore.pull` deletes a killed task's leftovers and repairs changed local bytes;
* :func:`use_ledger` refuses an embedded ledger when workers share no disk.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from platform_harness import s3_server

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.release import storage
from dpngram.release.context import RunContext, record_part, run_id_from
from dpngram.release.layout import IDENTITY_FILE, MANIFEST, asset_key
from dpngram.release.ledger import open_ledger
from dpngram.release.publish import complete_publishes, prepare, publish_run, release_asset_metadata
from dpngram.release.storage import (
    POINTER,
    ChecksumMismatch,
    ObjectRelease,
    fetch_verified,
    join,
    latest_release,
    read_json,
    read_manifest,
)
from dpngram.text.sample import write_sample

BUCKET = "dpngram-object-storage"


# -- helpers -------------------------------------------------------------------------------------
def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fresh_prefix() -> str:
    """A prefix of the module's bucket no other test writes under."""
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"


def local_tree(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (relative POSIX paths); {} when there is none."""
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): sha256(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()
    }


def s3_objects(fs, url: str) -> dict[str, bytes]:
    """Every object under ``url`` (relative key -> bytes), read with an independent S3 client."""
    root = url.removeprefix("s3://").rstrip("/") + "/"
    fs.invalidate_cache()
    return {key[len(root) :]: fs.cat_file(key) for key in fs.find(root)}


def assert_release_matches_manifest(fs, release: str) -> dict:
    """The objects of ``release`` are exactly its manifest's files plus the manifest, each with the
    manifest's size and SHA-256 (recomputed from the bytes in S3). Returns the manifest."""
    manifest = read_manifest(release)
    objects = s3_objects(fs, release)
    assert set(objects) == set(manifest["files"]) | {MANIFEST}
    for rel, meta in manifest["files"].items():
        assert len(objects[rel]) == meta["size"], rel
        assert sha256(objects[rel]) == meta["sha256"], rel
    assert json.loads(objects[MANIFEST]) == manifest
    return manifest


def stage_files(staging: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    return staging


def fake_files(n: int = 4, tag: str = "") -> dict[str, bytes]:
    """``n`` small released files with content of their own."""
    names = ["report.json", "released/vocabulary.parquet", "released/kgrams.parquet", "model/model.arpa"]
    names += [f"plots/p{i}.png" for i in range(max(0, n - len(names)))]
    return {name: f"{tag}:{name}:{uuid.uuid4().hex}".encode() for name in names[:n]}


def published_fake(out: str, dataset: str, run_id: str, staging_root: Path, n: int = 4) -> ObjectRelease:
    """A fake run of ``dataset`` staged under ``staging_root`` and published (no ledger)."""
    release = ObjectRelease(out, run_id, dataset, staging_root / run_id)
    stage_files(release.staging, fake_files(n, run_id))
    release.publish()
    return release


def prepared_run(sample: dict[str, Path], out: str, dataset: str, run_id: str, warehouse: Path) -> RunContext:
    """A run registered in the ledger by the real pre-check (:func:`prepare`: identity token,
    reservation) whose stages are faked: validated, with a report and a few released files, so
    that :func:`publish_run` publishes it."""
    config = RunConfig.build(
        input=str(sample["users"]),
        out=out,
        warehouse=str(warehouse),
        dataset=dataset,
        run_id=run_id,
        stage_budget={"dpne": 1.0},
    )
    ctx = RunContext(prepare(config))
    assert isinstance(ctx.release, ObjectRelease)
    stage_files(ctx.release.staging, fake_files(4, run_id))
    record_part(ctx, "validation", {"success": True})
    return ctx


class Killed(BaseException):
    """A kill in the middle of a step (BaseException: nothing on the way out may swallow it)."""


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3() -> Iterator:
    """One S3 server for the module; its AWS_* variables are set in this process meanwhile."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # none left from another module's server
    with s3_server(BUCKET) as server:
        yield server
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> dict[str, Path]:
    return write_sample(tmp_path_factory.mktemp("sample"), n_users=300, seed=11, public_sentences=300)


@pytest.fixture(scope="module")
def s3_release(s3, tmp_path_factory) -> SimpleNamespace:
    """One whole release (with a language model) into ``s3://BUCKET/PREFIX``, run by
    :func:`run_release` from an empty working directory, with a ledger and warehouse of its own."""
    from dpngram.orchestration.plan import run_release

    root = tmp_path_factory.mktemp("s3run")
    files = write_sample(root / "input", n_users=300, seed=11, public_sentences=300)
    cwd = root / "cwd"
    cwd.mkdir()
    before_input = local_tree(root / "input")
    xdg = Path(os.environ["XDG_DATA_HOME"])
    out = fresh_prefix()
    config = RunConfig.build(
        input=str(files["users"]),
        public=str(files["public"]),
        out=out,
        warehouse=str(root / "wh"),
        max_n=2,
        stage_budget={"dpne": 0.5, "lm_counts": 0.5},
        dataset="s3test",
    )
    patch = pytest.MonkeyPatch()
    try:
        patch.setenv("DPNGRAM_LEDGER", str(root / "ledger.duckdb"))
        patch.chdir(cwd)  # a relative OUT path would land here
        result = run_release(config)
        with open_ledger() as ledger:
            run = ledger.run(result["run_id"])
    finally:
        patch.undo()
    return SimpleNamespace(
        root=root,
        cwd=cwd,
        xdg=xdg,
        input_before=before_input,
        out=out,
        dataset="s3test",
        config=config,
        run_id=result["run_id"],
        url=result["release"],
        ledger_run=run,
        warehouse=root / "wh",
    )


# -- 1. a whole release to S3 --------------------------------------------------------------------
def test_a_release_to_s3_holds_exactly_the_manifest_files_with_their_sizes_and_sha256(s3, s3_release):
    r = s3_release
    assert r.url == join(r.out, r.dataset, "runs", r.run_id)
    manifest = assert_release_matches_manifest(s3.filesystem(), r.url)
    assert manifest["run_id"] == r.run_id and manifest["dataset"] == r.dataset
    # the release itself: report, released tables and the model, but not the staging's identity
    assert {"report.json", "released/vocabulary.parquet", "model/model.binary"} <= set(manifest["files"])
    assert not any(Path(rel).name == IDENTITY_FILE for rel in manifest["files"])
    # the dataset's home holds this one run and the pointer: no staging or partial objects
    home = s3_objects(s3.filesystem(), join(r.out, r.dataset))
    assert {key.split("/")[1] for key in home if key.startswith("runs/")} == {r.run_id}
    assert set(home) - {f"runs/{r.run_id}/{rel}" for rel in (*manifest["files"], MANIFEST)} == {POINTER}


def test_the_pointer_names_the_run_and_its_manifest_and_readers_follow_it(s3, s3_release):
    r = s3_release
    pointer = json.loads(s3.filesystem().cat_file(f"{r.out.removeprefix('s3://')}/{r.dataset}/{POINTER}"))
    manifest = read_manifest(r.url)
    assert pointer["run_id"] == r.run_id
    assert pointer["release"] == f"runs/{r.run_id}"
    assert pointer["published_at"] == manifest["published_at"]
    # the SHA-256 of the manifest object's bytes: `sha256sum MANIFEST.json` checks it without dpngram
    raw = s3.filesystem().cat_file(f"{r.url.removeprefix('s3://')}/{MANIFEST}")
    assert pointer["manifest_sha256"] == sha256(raw)
    assert latest_release(r.out, r.dataset) == r.url
    with pytest.raises(FileNotFoundError):
        latest_release(r.out, "no-such-dataset")


def test_a_fetched_model_is_verified_and_loads_in_kenlm(s3_release, tmp_path):
    import kenlm

    r = s3_release
    manifest = read_manifest(r.url)
    path = fetch_verified(r.url, "model/model.binary", tmp_path / "cache")
    assert path.is_file() and tmp_path / "cache" in path.parents
    assert sha256(path.read_bytes()) == manifest["files"]["model/model.binary"]["sha256"]
    model = kenlm.Model(str(path))
    report = read_json(join(r.url, "report.json"))
    assert model.order == report["model"]["order"]
    assert model.score("the", bos=True, eos=True) < 0  # a log10 probability
    # fetched again: reused from the cache (same path, same bytes)
    assert fetch_verified(r.url, "model/model.binary", tmp_path / "cache") == path
    with pytest.raises(FileNotFoundError, match="not in its"):
        fetch_verified(r.url, "model/missing.bin", tmp_path / "cache")


def test_after_publishing_to_s3_the_run_left_no_private_or_release_files_on_local_disk(s3_release):
    r = s3_release
    wh = r.warehouse
    assert r.ledger_run["state"] == "closed"
    assert r.ledger_run["staging"] == join(r.out, r.dataset, "runs", r.run_id) + ".staging"
    # the staging and the run's private tables are gone
    assert not (wh / "staging" / r.dataset / r.run_id).exists()
    assert not any((wh / "runs").glob(f"{r.run_id}.duckdb*"))
    # nothing was written outside the warehouse: no local OUT (e.g. ./s3:/...), the input untouched
    assert list(r.cwd.iterdir()) == []
    assert {p.name for p in r.root.iterdir()} <= {
        "input",
        "wh",
        "cwd",
        "ledger.duckdb",
        "ledger.duckdb.wal",
        "ledger.duckdb.locks",
    }
    assert local_tree(r.root / "input") == r.input_before
    released_names = {Path(rel).name for rel in read_manifest(r.url)["files"]}
    assert not [p for p in r.xdg.rglob("*") if r.run_id in p.name or p.name in released_names]
    for path in r.root.rglob("*"):
        if wh in path.parents or path.parent == r.root:
            continue
        assert r.run_id not in str(path.relative_to(r.root)) or "ledger.duckdb.locks" in str(path), path
        assert path.name not in released_names, path


# -- 2. tampering --------------------------------------------------------------------------------
def test_a_released_object_whose_bytes_changed_in_s3_is_refused_in_one_line(s3, tmp_path):
    out = fresh_prefix()
    release = published_fake(out, "tamper", "r1", tmp_path / "staging")
    good = fetch_verified(release.final, "released/vocabulary.parquet", tmp_path / "good")
    fs = s3.filesystem()
    key = f"{release.final.removeprefix('s3://')}/released/vocabulary.parquet"
    data = bytearray(fs.cat_file(key))
    data[0] ^= 0xFF  # same size, other bytes: only the SHA-256 tells
    fs.pipe_file(key, bytes(data))
    with pytest.raises(ChecksumMismatch) as err:
        fetch_verified(release.final, "released/vocabulary.parquet", tmp_path / "fresh")
    assert "\n" not in str(err.value) and "released/vocabulary.parquet" in str(err.value)
    # a verified copy already in a cache is not replaced by the tampered object
    assert fetch_verified(release.final, "released/vocabulary.parquet", tmp_path / "good") == good
    # a cached copy changed on the local disk is refused too (downloaded again: still tampered)
    good.write_bytes(b"changed locally")
    with pytest.raises(ChecksumMismatch):
        fetch_verified(release.final, "released/vocabulary.parquet", tmp_path / "good")


@pytest.mark.parametrize("tamper", ["pointer hash", "manifest", "pointer to a run without manifest"])
def test_latest_release_refuses_a_pointer_that_does_not_match_its_manifest(s3, tmp_path, tamper):
    out = fresh_prefix()
    release = published_fake(out, "tamper", "r1", tmp_path / "staging")
    assert latest_release(out, "tamper") == release.final
    pointer_url = join(out, "tamper", POINTER)
    pointer = read_json(pointer_url)
    if tamper == "pointer hash":
        storage.write_json(pointer_url, {**pointer, "manifest_sha256": sha256(b"another manifest")})
    elif tamper == "manifest":  # a manifest rewritten to vouch for other bytes
        manifest = read_manifest(release.final)
        manifest["files"]["report.json"]["sha256"] = sha256(b"forged report")
        storage.write_json(join(release.final, MANIFEST), manifest)
    else:
        storage.write_json(pointer_url, {**pointer, "run_id": "ghost", "release": "runs/ghost"})
    with pytest.raises(ChecksumMismatch) as err:
        latest_release(out, "tamper")
    assert "\n" not in str(err.value)


# -- 3. atomic for readers -------------------------------------------------------------------------
@pytest.mark.parametrize("previous", [False, True], ids=["first release", "after a release"])
def test_a_publish_killed_mid_upload_is_never_seen_by_readers_and_the_next_publish_finishes_it(
    s3, sample, tmp_path, own_ledger, monkeypatch, previous
):
    out = fresh_prefix()
    dataset = "atomic"
    earlier = None
    if previous:
        earlier = prepared_run(sample, out, dataset, "r-earlier", tmp_path / "wh")
        publish_run(earlier)
    ctx = prepared_run(sample, out, dataset, "r-killed", tmp_path / "wh")
    release = ctx.release
    staged = local_tree(release.staging)
    real_upload = storage.upload_file
    uploaded: list[str] = []

    def dies_after_two(local: Path, url: str) -> None:
        if len(uploaded) == 2:
            raise Killed("killed in the middle of the upload")
        real_upload(local, url)
        uploaded.append(url)

    monkeypatch.setattr(storage, "upload_file", dies_after_two)
    with pytest.raises(Killed):
        publish_run(ctx)
    monkeypatch.setattr(storage, "upload_file", real_upload)

    partial = storage.list_files(release.final)
    assert 0 < len(partial) < len(staged) and MANIFEST not in partial  # a real partial upload
    assert not release.published
    if earlier is None:
        assert read_json(join(out, dataset, POINTER)) is None
        with pytest.raises(FileNotFoundError):
            latest_release(out, dataset)
    else:
        assert latest_release(out, dataset) == earlier.release.final
    with open_ledger() as ledger:
        assert complete_publishes(ledger) == []  # a partial upload is not a complete release
        assert ledger.run(ctx.run_id)["state"] != "closed"
    assert release.staging.is_dir()

    assert publish_run(ctx) == release.final  # the retried task
    manifest = assert_release_matches_manifest(s3.filesystem(), release.final)
    assert set(manifest["files"]) == {rel for rel in staged if rel != IDENTITY_FILE}
    assert latest_release(out, dataset) == release.final
    assert not release.staging.exists()
    pointer = read_json(join(out, dataset, POINTER))
    assert publish_run(ctx) == release.final  # idempotent: once more changes nothing
    assert read_json(join(out, dataset, POINTER)) == pointer
    with open_ledger() as ledger:
        assert ledger.run(ctx.run_id)["state"] == "closed"


def test_a_publish_killed_between_manifest_and_pointer_is_completed_by_complete_publishes(
    s3, sample, tmp_path, own_ledger, monkeypatch
):
    out = fresh_prefix()
    ctx = prepared_run(sample, out, "between", "r1", tmp_path / "wh")

    def killed(self, manifest=None):
        raise Killed("killed after the manifest, before the pointer")

    monkeypatch.setattr(ObjectRelease, "point_latest", killed)
    with pytest.raises(Killed):
        publish_run(ctx)
    monkeypatch.undo()
    assert ctx.release.published  # the manifest is there: a complete release...
    with pytest.raises(FileNotFoundError):
        latest_release(out, "between")  # ...that readers do not reach yet
    with open_ledger() as ledger:
        assert ledger.run(ctx.run_id)["state"] != "closed"
        assert complete_publishes(ledger) == [ctx.release.final]
        assert ledger.run(ctx.run_id)["state"] == "closed"
        assert complete_publishes(ledger) == []  # nothing left to complete
    assert latest_release(out, "between") == ctx.release.final
    assert_release_matches_manifest(s3.filesystem(), ctx.release.final)
    assert not ctx.release.staging.exists()


# -- 4. the newest release wins --------------------------------------------------------------------
def test_completing_an_older_interrupted_publish_never_moves_the_pointer_back(
    s3, sample, tmp_path, own_ledger, monkeypatch
):
    out = fresh_prefix()
    older = prepared_run(sample, out, "newest", "r-older", tmp_path / "wh")
    newer = prepared_run(sample, out, "newest", "r-newer", tmp_path / "wh")

    def killed(self, manifest=None):
        raise Killed("killed before the pointer")

    monkeypatch.setattr(ObjectRelease, "point_latest", killed)
    with pytest.raises(Killed):
        publish_run(older)
    monkeypatch.undo()
    publish_run(newer)
    assert latest_release(out, "newest") == newer.release.final
    assert (
        read_manifest(older.release.final)["published_at"]
        < read_manifest(newer.release.final)["published_at"]
    )

    with open_ledger() as ledger:
        assert complete_publishes(ledger) == [older.release.final]
        assert ledger.run(older.run_id)["state"] == "closed"
    assert latest_release(out, "newest") == newer.release.final  # not moved back
    # the older run is a complete release of its own, reachable by its URL
    assert_release_matches_manifest(s3.filesystem(), older.release.final)
    # a direct re-run of the older publish says so too, and leaves the pointer
    assert older.release.point_latest() is False
    assert read_json(join(out, "newest", POINTER))["run_id"] == newer.run_id


def test_the_pointer_moves_to_each_newer_release_in_turn(s3, tmp_path):
    out = fresh_prefix()
    first = published_fake(out, "order", "r1", tmp_path / "staging")
    assert latest_release(out, "order") == first.final
    second = published_fake(out, "order", "r2", tmp_path / "staging")
    assert latest_release(out, "order") == second.final
    # another dataset into the same OUT never moves this dataset's pointer
    published_fake(out, "other", "r3", tmp_path / "staging")
    assert latest_release(out, "order") == second.final


# -- 5. asset metadata and keys --------------------------------------------------------------------
def test_asset_metadata_of_an_s3_release_gives_urls_and_the_manifest_sha256(s3_release, sample):
    r = s3_release
    files = read_manifest(r.url)["files"]
    metadata = release_asset_metadata(r.url, training_corpus=str(sample["public"]))
    assert metadata["release"]["release"] == r.url
    assert metadata["release"]["report"] == f"{r.url}/report.json"
    assert metadata["release"]["run_id"] == r.run_id and metadata["release"]["dataset"] == r.dataset
    for kind in ("ngrams", "language_model"):
        entry = metadata[kind]
        assert entry is not None and entry["paths"], kind
        assert set(entry["sha256"]) == set(entry["paths"])
        for name, url in entry["paths"].items():
            assert url.startswith(r.url + "/"), url
            assert entry["sha256"][name] == files[url.removeprefix(r.url + "/")]["sha256"]
    assert metadata["language_model"]["paths"]["binary"] == f"{r.url}/model/model.binary"
    assert metadata["ngrams"]["paths"]["vocabulary"] == f"{r.url}/released/vocabulary.parquet"
    # the ledger's charge, as the report states it
    report = read_json(join(r.url, "report.json"))
    assert metadata["release"]["ledger_epsilon_exact"] == report["privacy"]["ledger_charged"]["epsilon_exact"]


@pytest.mark.parametrize("out", ["s3://b/out", "s3://b/out/"])
def test_asset_keys_of_an_s3_out_are_urls_under_the_datasets_latest(out):
    assert asset_key("chats", "language_model", out) == (
        "dpngram_chats_language_model",
        "s3://b/out/chats/latest/model",
    )
    assert asset_key("chats", "ngrams", out) == ("dpngram_chats_ngrams", "s3://b/out/chats/latest/released")
    assert asset_key("chats", "release", out) == ("dpngram_chats_release", "s3://b/out/chats/latest")


def test_asset_key_of_a_local_out_is_a_file_url_of_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert asset_key("chats", "release", "rel/out") == (
        "dpngram_chats_release",
        f"file://{(tmp_path / 'rel' / 'out').resolve()}/chats/latest",
    )


# -- 6. the run store: the release DAG on two workers that share no disk ---------------------------
def test_the_release_dag_on_two_workers_sharing_only_s3_and_postgres_publishes_once_and_leaves_nothing(
    s3, sample, tmp_path, postgres_ledger_url, monkeypatch, caplog
):
    from dpngram.core.accounting import JOINT_TOLERANCE
    from dpngram.orchestration.plan import TASKS
    from dpngram.orchestration.task import LEDGER_CONNECTION, task_scope, use_ledger
    from dpngram.release.context import public_summary, stage_timer
    from dpngram.release.identity import operator_dir
    from dpngram.release.run_store import RunStore, sweep_closed

    caplog.set_level(logging.INFO, logger="dpngram.lm.public_cache")
    base = fresh_prefix()
    out, store = f"{base}/out", f"{base}/runs"
    dataset = "workers"
    run_id = run_id_from("manual__2026-06-01T00:00:00+00:00")
    workers = [tmp_path / "worker-a" / "wh", tmp_path / "worker-b" / "wh"]
    monkeypatch.delenv("DPNGRAM_LEDGER", raising=False)
    monkeypatch.setenv("DPNGRAM_RUN_STORE", store)
    default_warehouse = Path(os.environ["XDG_DATA_HOME"]) / "dpngram" / "warehouse"
    default_before = local_tree(default_warehouse)

    def connections(name: str) -> str | None:
        return postgres_ledger_url if name == LEDGER_CONNECTION else None

    def task_config(worker: Path) -> RunConfig:
        """What a task builds on ``worker``: the run's Params and run id, no warehouse (the
        worker's DPNGRAM_WAREHOUSE decides)."""
        monkeypatch.setenv("DPNGRAM_WAREHOUSE", str(worker))
        use_ledger(connections)  # as every task does first
        config = RunConfig.build(
            input=str(sample["users"]),
            public=str(sample["public"]),
            out=out,
            max_n=2,
            stage_budget={"dpne": 0.5, "lm_counts": 0.5},
            dataset=dataset,
            run_id=run_id,
        )
        assert Path(config.warehouse) == worker
        return config

    def pulled_equals_store(ctx: RunContext, before: dict[str, str], worker: Path) -> None:
        """Right after the pull: this worker's copies are the store's, and every file it has that
        it did not have before the task came from the store."""
        prefix = join(store, ctx.run_id)
        from_store: set[str] = set()
        indexes = (
            (ctx.release.staging, join(prefix, "staging.json")),
            # the operator files are kept beside the runs, and stay after the publish
            (operator_dir(ctx.config), join(store, "_operator", f"{ctx.run_id}.json")),
        )
        for local, index_url in indexes:
            index = read_json(index_url)
            if index is None:
                continue
            assert {rel: meta["sha256"] for rel, meta in index.items()} == local_tree(local), index_url
            from_store |= {(local / rel).relative_to(worker).as_posix() for rel in index}
        snapshot = read_json(join(prefix, "warehouse.json"))
        database = ctx.config.run_warehouse
        if snapshot is not None:
            assert database.is_file()
            marker = database.with_name(database.name + ".snapshot")
            assert marker.read_text().strip() == snapshot["id"]
            from_store |= {database.relative_to(worker).as_posix(), marker.relative_to(worker).as_posix()}
        now = local_tree(worker)
        for rel, digest in now.items():
            assert before.get(rel) == digest or rel in from_store, (
                f"{rel} came from neither the store nor this worker"
            )

    executed: list[tuple[str, int]] = []
    seen_database: list[bool] = [False, False]

    def on_worker(name: str, body) -> object:
        index = len(executed) % 2
        worker, other = workers[index], workers[1 - index]
        config = task_config(worker)
        before, other_before = local_tree(worker), local_tree(other)
        try:
            return body(config, lambda ctx: pulled_equals_store(ctx, before, worker))
        finally:
            executed.append((name, index))
            if config.run_warehouse.is_file():
                seen_database[index] = True
            assert local_tree(other) == other_before, (
                f"task {name} on worker {index} touched the other worker"
            )

    def precheck(config, check):
        with task_scope(config) as ctx:
            check(ctx)
            return prepare(config)

    def step(config, check, spec, kill_after_checkpoint=False):
        """``run_step`` of the DAG; ``kill_after_checkpoint``: the worker dies right after the
        stage pushed its persisted noisy output, before its ledger charge is finalized."""
        with task_scope(config, writes_private=spec.writes_private) as ctx:
            check(ctx)
            if kill_after_checkpoint:
                push = ctx.on_checkpoint

                def push_then_die() -> None:
                    push()
                    raise Killed(f"worker killed in task {spec.name}")

                ctx.on_checkpoint = push_then_die
            summary = {}
            for s in spec.applicable(config):
                with stage_timer(ctx, s.name):
                    summary = public_summary(s.run(ctx))
            return summary

    on_worker("privacy_precheck", precheck)
    probe = task_config(workers[0])  # the run's parameters (which tasks skip themselves)
    retried = "lm_counts"
    assert any(spec.name == retried and spec.skip_reason(probe) is None for spec in TASKS)
    for spec in TASKS:
        if spec.skip_reason(probe) is not None:
            continue
        if spec.name == retried:  # killed on one worker, retried by Airflow on the other
            with pytest.raises(Killed):
                on_worker(spec.name, functools.partial(step, spec=spec, kill_after_checkpoint=True))
            with open_ledger(postgres_ledger_url) as ledger:
                assert ledger.entry(dataset, run_id, retried)["status"] == "pending"
            summary = on_worker(spec.name, functools.partial(step, spec=spec))
            assert summary["reused"] is True  # the pushed output, not a second draw
            with open_ledger(postgres_ledger_url) as ledger:
                assert ledger.entry(dataset, run_id, retried)["status"] == "final"
            continue
        on_worker(spec.name, functools.partial(step, spec=spec))

    def publish(config, check):
        with task_scope(config, push=False) as ctx:
            check(ctx)
            location = publish_run(ctx)
            RunStore(store, ctx).remove()
        return location

    location = on_worker("publish", publish)

    # both workers worked on the run's private tables (the one that did not ingest: from the store)
    assert seen_database == [True, True]

    # the release is published, complete, and what readers find
    assert location == join(out, dataset, "runs", run_id)
    assert latest_release(out, dataset) == location
    manifest = assert_release_matches_manifest(s3.filesystem(), location)
    assert "model/model.binary" in manifest["files"]
    assert (
        release_asset_metadata(location, training_corpus=str(sample["public"]))["language_model"] is not None
    )

    # nothing of the run is left in the store but its operator-only files, kept apart: the one
    # complete copy once the workers sweep theirs (timings of every task, the operator report)
    assert storage.list_files(join(store, run_id)) == []
    operator_files = set(storage.list_files(join(store, "_operator", run_id)))
    assert {"run.json", "operator_report.json", "timings/ingest.json", "timings/lm.json"} <= operator_files
    publisher, other = workers[executed[-1][1]], workers[1 - executed[-1][1]]
    assert not (publisher / "staging" / dataset / run_id).exists()
    assert not (publisher / "runs" / f"{run_id}.duckdb").exists()
    # the other worker still holds its copy until it sweeps the closed run
    assert (other / "runs" / f"{run_id}.duckdb").is_file()
    with open_ledger(postgres_ledger_url) as ledger:
        assert sweep_closed(ledger, other) == [run_id]
        assert sweep_closed(ledger, other) == []
        run = ledger.run(run_id)
        entries = ledger.entries(dataset)
        spent = ledger.spent(dataset, run_id)
    assert not any((other / "runs").glob(f"{run_id}.duckdb*"))
    assert not (other / "staging" / dataset / run_id).exists()
    assert not (other / "operator" / run_id).exists()  # its copy is in the store
    assert local_tree(default_warehouse) == default_before  # no task fell back to the per-user warehouse

    # the public model was fitted for both workers once: its entries are in the store's shared copy
    # of the public-model cache (not the run's released mixture, one per run), each worker's own
    # entries are among them, and a worker read at least one instead of computing it
    shared = storage.list_files(join(store, "_cache", "public"))
    kinds = {f.split("/")[0] for f in shared}
    assert {"counts", "models", "structure", "frequent"} <= kinds
    assert not kinds & {"mixtures", "mixture_links"}
    shared_models = {f.split("/")[1] for f in shared if f.startswith("models/") and f.endswith("/meta.json")}
    for worker in workers:
        local_models = {
            p.name for p in (worker / "cache" / "public" / "models").glob("*") if not p.name.startswith(".")
        }
        assert local_models and local_models <= shared_models
    assert "from the shared copy" in caplog.text

    # the ledger: closed, one entry per charged stage, adding up to the run's epsilon
    assert run["state"] == "closed"
    report = read_json(join(location, "report.json"))
    stages = report["privacy"]["stages"]
    assert all(e["run_id"] == run_id for e in entries)
    assert sorted(e["stage"] for e in entries) == sorted(stages)  # exactly one each
    for e in entries:
        assert e["epsilon"] == pytest.approx(stages[e["stage"]]["charged_epsilon"], rel=1e-12)
    assert spent.epsilon == pytest.approx(sum(e["epsilon"] for e in entries), rel=1e-12)
    assert spent.epsilon == pytest.approx(report["privacy"]["ledger_charged"]["epsilon_exact"], rel=1e-9)
    # the joint calibration spends the run's epsilon up to its tolerance, never more
    assert probe.epsilon * (1 - JOINT_TOLERANCE) <= spent.epsilon <= probe.epsilon * (1 + 1e-12)
    assert spent.delta == pytest.approx(probe.delta, rel=1e-12)


def test_the_shared_public_cache_on_s3_keeps_its_most_recently_used_entries(s3, tmp_path, monkeypatch):
    """The public-model cache's shared copy on S3 (dpngram.lm.public_cache._prune_shared): object
    stores keep no access time, so a download writes the entry's ``used`` mark; an upload then
    removes the kind's least recently used entries beyond SHARED_KEEP, by S3's LastModified."""
    import time

    import polars as pl

    from dpngram.lm import public_cache

    store = fresh_prefix()
    monkeypatch.setenv(public_cache.RUN_STORE_ENV, store)
    monkeypatch.setitem(public_cache.SHARED_KEEP, "counts", 2)
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    computed: list[str] = []

    def entry(worker: str, key: str) -> None:
        def compute() -> dict[int, pl.DataFrame]:
            computed.append(f"{worker}:{key}")
            return {1: frame}

        public_cache.cached_tables(tmp_path / worker, "counts", key, compute)
        time.sleep(1.1)  # LastModified is kept to the second or the millisecond

    entry("a", "old")
    entry("a", "newer")
    entry("b", "old")  # downloaded: marked as used
    entry("c", "third")
    fs, root = storage.filesystem(join(store, "_cache", "public", "counts"))
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(root)) == ["old", "third"]
    assert computed == ["a:old", "a:newer", "c:third"]
    assert fs.exists(f"{root}/old/{public_cache.USED}")


def test_sweep_closed_removes_the_staging_of_a_worker_that_only_ran_the_precheck(
    s3, sample, tmp_path, own_ledger, monkeypatch
):
    from dpngram.orchestration.task import task_scope
    from dpngram.release.run_store import RunStore, sweep_closed

    base = fresh_prefix()
    store = f"{base}/runs"
    monkeypatch.setenv("DPNGRAM_RUN_STORE", store)

    def config(worker: str) -> RunConfig:
        return RunConfig.build(
            input=str(sample["users"]),
            out=f"{base}/out",
            warehouse=str(tmp_path / worker),
            dataset="sweep",
            run_id="r-sweep",
            stage_budget={"dpne": 1.0},
        )

    with task_scope(config("a")):  # privacy_precheck on worker a
        prepare(config("a"))
    leftover = tmp_path / "a" / "staging" / "sweep" / "r-sweep"
    assert leftover.is_dir()
    with task_scope(config("b"), push=False) as ctx:  # the rest (faked here) and publish on worker b
        stage_files(ctx.release.staging, fake_files(2, "b"))
        record_part(ctx, "validation", {"success": True})
        publish_run(ctx)
        RunStore(store, ctx).remove()
    with open_ledger() as ledger:
        assert ledger.run("r-sweep")["state"] == "closed"
        sweep_closed(ledger, tmp_path / "a")
    assert not leftover.exists(), sorted(p.name for p in leftover.rglob("*"))


# -- 7. run store pull ---------------------------------------------------------------------------
def test_pull_deletes_a_killed_tasks_leftovers_and_repairs_changed_local_bytes(s3, tmp_path):
    from dpngram.release.identity import operator_dir
    from dpngram.release.run_store import RunStore

    base = fresh_prefix()
    store = f"{base}/runs"

    def context(worker: str) -> RunContext:
        config = RunConfig.build(
            input=str(tmp_path / "in.jsonl"),
            out=f"{base}/out",
            warehouse=str(tmp_path / worker),
            dataset="pull",
            run_id="r-pull",
        )
        return RunContext(config)

    first, second = context("w1"), context("w2")
    stage_files(first.release.staging, fake_files(4, "w1"))
    stage_files(
        operator_dir(first.config), {"run.json": b'{"run_id": "r-pull"}', "timings/ingest.json": b"{}"}
    )
    first.config.run_warehouse.parent.mkdir(parents=True, exist_ok=True)
    first.config.run_warehouse.write_bytes(b"private tables v1")
    RunStore(store, first).push(warehouse=True)

    puller = RunStore(store, second)
    puller.pull()
    assert local_tree(second.release.staging) == local_tree(first.release.staging)
    assert local_tree(operator_dir(second.config)) == local_tree(operator_dir(first.config))
    assert second.config.run_warehouse.read_bytes() == b"private tables v1"

    # a killed task on the second worker: a partial output, a changed file, an unfinished write
    staging = second.release.staging
    (staging / "released" / "lm_counts.parquet").write_bytes(b"written by a task that was killed")
    (staging / "report.json").write_bytes(b"changed locally")
    (staging / "released" / ".kgrams.parquet.partial").write_bytes(b"half")
    (operator_dir(second.config) / "timings" / "lm_counts.json").write_bytes(b"{}")
    # the store's snapshot of the private tables moved on (another worker ingested again)
    first.config.run_warehouse.write_bytes(b"private tables v2")
    RunStore(store, first).push(warehouse=True)

    puller.pull()
    assert local_tree(staging) == local_tree(first.release.staging)
    assert not (staging / "released" / "lm_counts.parquet").exists()
    assert (staging / "report.json").read_bytes() == (first.release.staging / "report.json").read_bytes()
    assert local_tree(operator_dir(second.config)) == local_tree(operator_dir(first.config))
    assert second.config.run_warehouse.read_bytes() == b"private tables v2"

    # a file the first worker removed is removed from the store at its next push, then here
    (first.release.staging / "model" / "model.arpa").unlink()
    RunStore(store, first).push()
    assert "model/model.arpa" not in storage.list_files(join(store, "r-pull", "staging"))
    puller.pull()
    assert not (staging / "model" / "model.arpa").exists()

    RunStore(store, first).remove()
    assert storage.list_files(join(store, "r-pull")) == []


# -- 8. a shared ledger for workers that share no disk ------------------------------------------------
def test_use_ledger_refuses_an_embedded_ledger_when_a_run_store_is_set(tmp_path, monkeypatch):
    from dpngram.orchestration.task import LEDGER_CONNECTION, use_ledger

    monkeypatch.setenv("DPNGRAM_LEDGER", str(tmp_path / "ledger.duckdb"))
    assert use_ledger(lambda name: None) == str((tmp_path / "ledger.duckdb").resolve())  # one machine: fine
    monkeypatch.setenv("DPNGRAM_RUN_STORE", "s3://private/runs")
    for env in (str(tmp_path / "ledger.duckdb"), None):
        if env is None:
            monkeypatch.delenv("DPNGRAM_LEDGER")  # the per-user file
        with pytest.raises(ConfigError) as err:
            use_ledger(lambda name: None)
        message = str(err.value)
        assert "\n" not in message and f"'{LEDGER_CONNECTION}'" in message and "DPNGRAM_RUN_STORE" in message


def test_use_ledger_accepts_a_postgresql_connection_when_a_run_store_is_set(monkeypatch):
    from dpngram.orchestration.task import LEDGER_CONNECTION, use_ledger

    monkeypatch.delenv("DPNGRAM_LEDGER", raising=False)
    monkeypatch.setenv("DPNGRAM_RUN_STORE", "s3://private/runs")
    url = "postgresql://dpngram:s3cret@db.internal:5432/ledger"
    shown = use_ledger(lambda name: url if name == LEDGER_CONNECTION else None)
    assert "s3cret" not in shown and "db.internal:5432/ledger" in shown
    assert os.environ["DPNGRAM_LEDGER"] == url  # the task's process now charges that ledger
