"""Sweeps: a plan's top candidates run as short Slurm benchmarks, and their logs read back against the predictions.

`moetune sweep write` puts each candidate's launch files in a folder of its own (cli/sweep_cmd.py, through emit) with a
manifest (manifest.py) and a submit script (submit.py); `moetune sweep ingest` reads each folder's training log
(measure.py), compares it with the prediction and the predicted order (compare.py), and refits the per-GPU constants
to what the cluster measured (planner/user_runs.py, as `calibrate --runs` does).
"""
