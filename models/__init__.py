"""Pure-torch model code: feature maps, the linear-attention op (three modes), layers, the LM, save/load.

Imports neither Lightning nor ``data``: usable from a notebook with torch alone.
"""

from .config import ConfigError, ModelConfig
from .feature_maps import FEATURE_MAPS, make_feature_map
from .io import ModelLoadError, load, save_model
from .layers import KVState, LinearState
from .lm import LinearTransformerLM
from .ops import AttnState, init_attn_state, linear_attention
from .ops_delta import delta_rule_attention
from .ops_gated import gated_linear_attention
from .state import load_state, save_state

__all__ = [
    "FEATURE_MAPS",
    "AttnState",
    "ConfigError",
    "KVState",
    "LinearState",
    "LinearTransformerLM",
    "ModelConfig",
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
