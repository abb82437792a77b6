"""The control plane of a stack ``serving up`` runs: its admin endpoint and the changes it makes."""
