"""Trial records below the measurement and database layers: the value and its JSON codec."""
from autotune.records.codec import (
    ERROR_KINDS,
    canonical_workload_key,
    record_from_json,
    record_to_json,
)
from autotune.records.trial import TrialRecord

__all__ = ["ERROR_KINDS", "TrialRecord", "canonical_workload_key", "record_from_json",
           "record_to_json"]
