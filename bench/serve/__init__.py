"""The load tool (``pdserve bench serve``): flags, backends, the runner, sweeps and the side-by-side comparison."""
