"""Vision-language-action policies (``vla``): a VLM backbone conditioning a flow-matching action expert.

Import the submodules directly (``omnigym.policies.vla.policy``): this package imports nothing
heavy (``transformers`` loads with the policy), so ``import omnigym`` stays light.
"""
