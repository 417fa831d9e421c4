"""Vision-language (and text-only language) model policies (``transformers``; ``omnigym[vlm]``).

Import the submodules directly (``omnigym.policies.vlm.policy``): this package imports nothing
heavy, so ``import omnigym`` stays light.
"""
