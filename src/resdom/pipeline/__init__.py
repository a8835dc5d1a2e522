"""End-to-end pipelines: the demo (synthetic data, minutes, offline) and the reproduction grid."""

from resdom.pipeline.demo import DemoResult, DemoSettings, run_demo
from resdom.pipeline.reproduce import GridResult, GridSpec, RunOutcome, reproduce

__all__ = ["DemoResult", "DemoSettings", "GridResult", "GridSpec", "RunOutcome", "reproduce", "run_demo"]
