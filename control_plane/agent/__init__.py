"""`sluice agent`: reads GPU telemetry on a GPU host and reports it to the control plane."""
