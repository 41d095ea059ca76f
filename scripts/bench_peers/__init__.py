"""One adapter module per benchmarked system (see ``base.Adapter``).

Each module also defines, at import time, the system's registrations of the
shared job bodies of ``bench_jobs``, so its workers import the same module.
"""
