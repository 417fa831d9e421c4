"""The driving pseudo-simulator (NAVSIM / PerlAD style) with the PDM score: docs/envs/driving.md."""
