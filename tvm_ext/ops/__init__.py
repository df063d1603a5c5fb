"""One module per template family: compute + schedule + fallback config + applicability.

Importing a module registers its templates (``tvm_ext.template``)."""
