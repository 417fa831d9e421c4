"""Diffusion Policy (Chi et al., 2023): DDPM-trained action chunks, DDIM / DPM-Solver sampling."""
