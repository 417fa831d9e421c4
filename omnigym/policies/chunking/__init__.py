"""What the action-chunk generative policies share.

Normalisers, observation encoders, the FiLM-conditioned 1-D U-Net, chunked acting with a
receding horizon, demonstration windows and the imitation loop. ``diffusion`` (DDPM/DDIM),
``flow`` (rectified flow) and ``meanflow`` (one-step average velocity) differ only in their
training objective and sampler.
"""
