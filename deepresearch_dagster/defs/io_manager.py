"""IO manager that owns the deterministic artifact layout of every research stage."""

from __future__ import annotations

import pickle

from dagster import ConfigurableIOManager, Failure, InputContext, MetadataValue, OutputContext
from pydantic import BaseModel

from ..core.errors import storage_failure
from ..core.models import ToolOutputs
from ..core.pipeline import STAGE_FILES, load_stage, save_stage
from ..core.store.artifacts import ArtifactStore
from ..core.store.object_store import ObjectRoot, object_root


def verify_raw_files(store: ArtifactStore, outputs: ToolOutputs) -> None:
    """Every raw file of the manifest exists and matches its sha256 (else ArtifactIntegrityError)."""
    for call in outputs.calls:
        store.read_verified(call.artifact_path, call.sha256)


class ResearchIOManager(ConfigurableIOManager):
    """``<artifacts_dir>/<partition>/<stage file>``; raw outputs are checked against sha256
    both when the manifest is stored and when it is loaded back."""

    artifacts_dir: str

    def _store(self, partition_key: str) -> ArtifactStore:
        from ..core.config import load_settings

        # The shared object store (a team deployment) comes from the run process's configuration:
        # its credentials are never part of the resource config.
        return ArtifactStore(self.artifacts_dir, partition_key, object_root(load_settings()))

    def handle_output(self, context: OutputContext, obj: BaseModel) -> None:
        stage = context.asset_key.path[-1]
        store = self._store(context.asset_partition_key)
        try:
            if isinstance(obj, ToolOutputs):
                verify_raw_files(store, obj)
            name = save_stage(store, stage, obj)
        except OSError as exc:
            # A full or read-only disk: one line (not DagsterExecutionHandleOutputError and a
            # traceback), and never retried: the same write fails the same way.
            storage = storage_failure(exc)
            if storage is None:
                raise
            raise Failure(
                description=f"{stage} failed: {storage}", metadata={"kind": "storage"}, allow_retries=False
            ) from exc
        context.add_output_metadata({"stored_at": MetadataValue.path(str(store.partition_dir / name))})

    def load_input(self, context: InputContext) -> BaseModel:
        stage = context.upstream_output.asset_key.path[-1]
        if stage not in STAGE_FILES:
            raise KeyError(f"ResearchIOManager does not store {stage}")
        store = self._store(context.asset_partition_key)
        if not store.exists(STAGE_FILES[stage][0]):
            # Only part of the research was selected and an upstream stage never ran: retrying
            # cannot help, and a traceback would not say what to do.
            raise Failure(
                description=(
                    f"{stage} of partition {context.asset_partition_key} has not been materialized "
                    f"({STAGE_FILES[stage][0]} is missing): launch research_job for this partition, or select all "
                    "four assets and Materialize"
                ),
                allow_retries=False,
            )
        value = load_stage(store, stage)
        if isinstance(value, ToolOutputs):
            verify_raw_files(store, value)
        return value


class SharedRunIOManager(ConfigurableIOManager):
    """Op-to-op outputs of a run (the calls handed to the mapped compression op, its results) in
    the shared object store, under ``_dagster_runs/<run id>/<step>/<output>[/<mapping key>]``: with
    steps on Celery workers on several hosts, a step reads what a step on another host wrote.
    (Dagster's default keeps them under the launching host's DAGSTER_HOME.) Partition folders start
    with a letter or digit, so the ``_`` prefix never meets a research's files."""

    def _root(self) -> ObjectRoot:
        from ..core.config import load_settings

        root = object_root(load_settings())
        if root is None:
            raise Failure(description="DEEPRESEARCH_ARTIFACTS_URL is not set on this worker", allow_retries=False)
        return root

    @staticmethod
    def _key(identifier: list[str]) -> str:
        return "_dagster_runs/" + "/".join(identifier) + ".pickle"

    def handle_output(self, context: OutputContext, obj: object) -> None:
        self._root().put(self._key(context.get_identifier()), pickle.dumps(obj))

    def load_input(self, context: InputContext) -> object:
        key = self._key(context.upstream_output.get_identifier())
        data = self._root().get(key)
        if data is None:
            raise Failure(description=f"{key} is missing from the object store", allow_retries=False)
        return pickle.loads(data)  # written by this deployment's own steps, in its own bucket
