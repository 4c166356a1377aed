"""Shared inputs for the oracle tests: real HF configs and published checkpoint counts.

Every count below is an exact element count of a released Hugging Face checkpoint, taken from
the public source named beside it (never from our code).
"""

import json
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "models"


def load_config(name: str) -> dict:
    return json.loads((MODELS / f"{name}.config.json").read_text())


# keras-team/keras-hub keras_hub/src/models/mixtral/mixtral_presets.py ("params": 46702792704,
# converted from mistralai/Mixtral-8x7B-v0.1).
MIXTRAL_8X7B = 46_702_792_704
# Hugging Face Hub API safetensors total for Qwen/Qwen3-30B-A3B (also llama.cpp
# general.parameter_count of its GGUFs); the model card says "30.5B in total".
QWEN3_30B_A3B = 30_532_122_624
# keras-team/keras-hub keras_hub/src/models/qwen_moe/qwen_moe_presets.py
# ("params": 14315784192 for Qwen1.5-MoE-A2.7B); the model card says 14.3B.
QWEN15_MOE_A27B = 14_315_784_192
# Hugging Face Hub API safetensors total for Qwen/Qwen2-57B-A14B ({"safetensors":{"total":
# 57408658944}}, as recorded in public API fixtures); the Qwen2 blog table says 57.41B.
QWEN2_57B_A14B = 57_408_658_944
# huggingface/huggingface.js packages/hub/src/lib/parse-safetensors-metadata.spec.ts:
# openai/gpt-oss-20b = 20,914,757,184 (BF16 1,804,459,584 + MXFP4 weights 19,110,297,600) and
# openai/gpt-oss-120b = 116,829,156,672; OpenAI's model card (arXiv:2508.10925, Table 1) gives
# 20.91B and 116.83B.
GPT_OSS_20B = 20_914_757_184
GPT_OSS_120B = 116_829_156_672
# Hugging Face Hub API safetensors metadata for deepseek-ai/DeepSeek-V3 (the same figures are
# listed for DeepSeek-R1): BF16 3,918,786,560 + F8_E4M3 680,571,043,840, plus F32 tensors (FP8
# block scales and e_score_correction_bias) that are not MCore parameters - the bias is a
# router *buffer* in MCore.
DEEPSEEK_V3_BF16 = 3_918_786_560
DEEPSEEK_V3_F8 = 680_571_043_840
