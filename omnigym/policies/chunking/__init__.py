"""What the action-chunk generative policies share.

Normalisers, observation encoders, the FiLM-conditioned 1-D U-Net, chunked acting with a
receding horizon and demonstration windows; the imitation loop that trains them is
``omnigym.platform.trainers.imitation``. ``diffusion`` (DDPM/DDIM), ``flow`` (rectified flow)
and ``meanflow`` (one-step average velocity) differ only in their training objective and sampler.
"""
