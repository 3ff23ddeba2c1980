"""Background precompiling: shadow state (shadow.py), marked steps (marked.py), the planner of likely
next graphs (planner.py), and the queue that runs jobs while the kernel is idle (queue.py)."""
