"""How a serving engine shares its steps between prompts and decodes: the scheduling profiles of the modeled serving
software (``profiles``), and data-parallel attention's ranks, each with its own scheduler (``ranks``). The scheduler
itself is ``engine/scheduler.py``."""
