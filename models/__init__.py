"""Pure-torch model code: feature maps, the linear-attention op (three modes), layers, the LM, save/load.

Imports neither Lightning nor ``data``: usable from a notebook with torch alone.
"""

from strandline.models.config import ConfigError, ModelConfig
from strandline.models.feature_maps import FEATURE_MAPS, make_feature_map
from strandline.models.layers import KVState, LinearState
from strandline.models.lm import LinearTransformerLM
from strandline.models.ops.delta import delta_rule_attention
from strandline.models.ops.gated import gated_linear_attention
from strandline.models.ops.linear import AttnState, init_attn_state, linear_attention
from strandline.models.persist.io import ModelLoadError, load, save_model
from strandline.models.persist.state import load_state, save_state
from strandline.models.state import LMState, Memory

__all__ = [
    "FEATURE_MAPS",
    "AttnState",
    "ConfigError",
    "KVState",
    "LMState",
    "LinearState",
    "LinearTransformerLM",
    "ModelConfig",
    "Memory",
    "ModelLoadError",
    "delta_rule_attention",
    "gated_linear_attention",
    "init_attn_state",
    "linear_attention",
    "load",
    "load_state",
    "make_feature_map",
    "save_model",
    "save_state",
]
