"""Discrete-event simulation of a prefill/decode cluster in virtual time (``pdserve simulate``) and the deployment
planner on top of it (``pdserve plan``)."""
