"""Engine and clock benchmarks: the engine against its floor and llama.cpp, pacing, simulator speed, stop rules."""
