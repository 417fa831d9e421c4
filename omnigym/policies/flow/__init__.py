"""Flow-matching action-chunk policies: rectified flow (``flow``) and MeanFlow (``meanflow``)."""
