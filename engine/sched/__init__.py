"""The one scheduler every worker, the in-process engine and the simulator run, and its scheduling profiles."""
