"""Tuning spaces in AutoTVM's vocabulary, as plain data.

A ``ConfigSpace`` is an ordered list of knobs. Each knob is a small space of entities:

- ``define_split``    an axis split into ``num_outputs`` factors (``"sp"`` in logs)
- ``define_knob``     a value out of a candidate list (``"ot"``)
- ``define_reorder``  a permutation of some loops (``"re"``)
- ``define_annotate`` an annotation per loop: none / unroll / vec (``"an"``)

A config is one entity per knob. Configs are numbered in AutoTVM's mixed-radix order: the
first-defined knob is the least significant digit, so an index from an old AutoTVM log of the same
space means the same config here. Let terms (``define_let``) name sub-expressions over knobs and
facts; constraints over several knobs (and hardware facts such as the vector width or the shared
memory per block) prune configs before anything is built.

Knob ranges, let terms and constraints are data: ``tuning_spaces/<template>.json`` (see
``build_space``). Nothing here imports TVM, so spaces are built, counted and enumerated in
milliseconds.

Modules, bottom up: ``expr`` (the safe expression evaluator), ``knobs`` (entities and knob
spaces), ``config`` (configs and ConfigSpace), ``spec`` (space files).
"""
from .config import ConfigEntity, ConfigSpace, FallbackConfig
from .expr import Expr, eval_expr
from .knobs import (AnnotateEntity, AnnotateSpace, KnobSpace, OtherOptionEntity,
                    OtherOptionSpace, ReorderEntity, ReorderSpace, SplitEntity, SplitSpace,
                    get_factors, get_pow2s)
from .spec import (SPACES_DIR, build_space, data_dir, knob_default_exprs, knob_defaults,
                   knob_values, load_space_spec, narrow_spec)

__all__ = ["AnnotateEntity", "AnnotateSpace", "ConfigEntity", "ConfigSpace", "Expr",
           "FallbackConfig", "KnobSpace", "OtherOptionEntity", "OtherOptionSpace",
           "ReorderEntity", "ReorderSpace", "SPACES_DIR", "SplitEntity", "SplitSpace",
           "build_space", "data_dir", "eval_expr", "get_factors", "get_pow2s",
           "knob_default_exprs", "knob_defaults", "knob_values", "load_space_spec",
           "narrow_spec"]
