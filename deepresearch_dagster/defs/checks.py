"""Asset checks defined apart from the assets (the assets' own checks live in assets.py)."""

import warnings

from dagster import AssetCheckResult, AssetCheckSeverity, MetadataValue, PreviewWarning, asset_check
from dagster_duckdb import DuckDBResource

from ..core.checks import record_check
from ..core.models import SummaryBundle
from ..core.pipeline import bundle_version_file
from ..core.store.object_store import artifact_store
from .assets import compressed_summaries
from .partitions import research_partitions
from .resources import ResearchConfig, lineage_store


def _summaries_match_lineage(
    research: ResearchConfig, duckdb: DuckDBResource, compressed_summaries: SummaryBundle
) -> AssetCheckResult:
    bundle = compressed_summaries
    lineage = lineage_store(duckdb)
    calls = lineage.tool_call_ids(bundle.partition_key)
    in_bundle = [s.call_id for s in bundle.summaries]
    recorded = lineage.summary_versions(bundle.partition_key)
    expected = {(s.call_id, s.compressor_model, s.prompt_version) for s in bundle.summaries}
    store = artifact_store(research.settings(duckdb.database), bundle.partition_key)
    versioned = bundle_version_file(bundle.compressor_model, bundle.prompt_version)
    copy_ok = store.exists(versioned) and store.read_text(versioned) == store.read_text("compressed_summaries.json")
    # In raw-context mode (benchmarks only) summaries carry no compressor version by design.
    versions_ok = all(
        s.raw_context or (s.compressor_model, s.prompt_version) == (bundle.compressor_model, bundle.prompt_version)
        for s in bundle.summaries
    )
    missing = sorted(calls - set(in_bundle))
    passed = not missing and len(in_bundle) == len(set(in_bundle)) and expected <= recorded and copy_ok
    passed = passed and versions_ok
    summary = (
        f"{len(in_bundle)} summaries match their tool calls, DuckDB rows and versioned copy"
        if passed
        else f"summaries and lineage differ: {len(missing)} tool call(s) without a summary, "
        f"{len(expected - recorded)} summaries not in DuckDB, versioned copy {'matches' if copy_ok else 'differs'}"
    )
    record_check(store, "summaries_match_lineage", passed, AssetCheckSeverity.ERROR.value, summary)
    return AssetCheckResult(
        passed=passed,
        severity=AssetCheckSeverity.ERROR,
        description=summary,
        metadata={
            "summary": summary,
            "tool_calls": len(calls),
            "summaries": len(in_bundle),
            "not_in_duckdb": MetadataValue.json(sorted(c for c, _, _ in expected - recorded)),
            "missing_call_ids": MetadataValue.json(missing),
            "versioned_copy": versioned,
            "versioned_copy_matches": copy_ok,
        },
    )


# Partitioned asset checks are "preview" in Dagster 1.13; the warning would print on every CLI run.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", PreviewWarning)
    summaries_match_lineage = asset_check(
        asset=compressed_summaries,
        name="summaries_match_lineage",
        partitions_def=research_partitions,
        description=(
            "Every recorded tool call has exactly one summary in the bundle, DuckDB holds the same summaries "
            "under their compressor model and prompt version, and the versioned copy is on disk."
        ),
    )(_summaries_match_lineage)

research_checks = [summaries_match_lineage]
