"""The Megatron-MoE-ModelZoo DeepSeek-V3 config as its H100 best practice launches it: the environment its launcher
fills the YAML's placeholders from, and the flags it adds on the command line
(best_practice/deepseek-v3/run_deepseek_v3_h100.sh through sbatch_benchmarking.sh with PR=fp8, A2A_OVERLAP=1 and its
default DISPATCHER=deepep; forced balance, as the published rows of this configuration ran)."""

from pathlib import Path

MODELZOO = Path(__file__).resolve().parent / "fixtures" / "megatron_lm" / "modelzoo_deepseek_v3.yaml"
H100_ENV = {"TP": "2", "PP": "8", "EP": "64", "CP": "1", "MBS": "1", "GBS": "8192", "SEQ_LEN": "4096"}
H100_FLAGS = ('--recompute-granularity selective --recompute-modules mla_up_proj mlp --mtp-num-layers 1 '
              '--mtp-loss-scaling-factor 0.1 --pipeline-model-parallel-layout "Et|(tt|)*30mL" '
              '--fp8-recipe blockwise --fp8-format e4m3 --moe-token-dispatcher-type flex '
              '--moe-flex-dispatcher-backend deepep --overlap-moe-expert-parallel-comm --delay-wgrad-compute '
              '--moe-router-force-load-balancing')
