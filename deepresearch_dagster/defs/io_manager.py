"""IO manager that owns the deterministic artifact layout of every research stage."""

from __future__ import annotations

from dagster import ConfigurableIOManager, Failure, InputContext, MetadataValue, OutputContext
from pydantic import BaseModel

from ..core.errors import storage_failure
from ..core.models import ToolOutputs
from ..core.pipeline import STAGE_FILES, load_stage, save_stage
from ..core.store.artifacts import ArtifactStore


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
        from ..core.store.object_store import object_root

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
