"""Profile a measured run: Kineto traces and Megatron logs in, the dominant wall and next changes out."""

from moetune.profile.diagnose import DiagnoseResult, diagnose
from moetune.profile.megatron_log import TrainingLog, parse_log, read_log
from moetune.profile.rank_trace import RankTrace
from moetune.profile.reader import read_trace

__all__ = ["DiagnoseResult", "RankTrace", "TrainingLog", "diagnose", "parse_log", "read_log", "read_trace"]
